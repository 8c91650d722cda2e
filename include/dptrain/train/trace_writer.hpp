// The --trace file: Chrome trace events (the JSON object format with "traceEvents"), which Perfetto and
// chrome://tracing open. One process per rank (pid = rank), thread 0 its compute, thread 1 its communication;
// every event is a complete event ("ph": "X") with microsecond start and duration since the common origin.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dptrain/dp/timeline.hpp"

namespace dptrain {

// One rank's events, with the metadata events that name its process and threads.
nlohmann::json trace_events(const std::vector<TimelineEvent>& events, int rank);

// Writes every rank's events (JSON arrays as text, in rank order) as one trace file, atomically.
void write_trace(const std::string& path, const std::vector<std::string>& rank_events);

}  // namespace dptrain
