// Chrome trace events from the engine's timeline.
#include "dptrain/train/trace_writer.hpp"

#include <fmt/format.h>

#include "dptrain/core/atomic_file.hpp"

namespace dptrain {

nlohmann::json trace_events(const std::vector<TimelineEvent>& events, int rank) {
  nlohmann::json out = nlohmann::json::array();
  auto name = [&](const char* what, int tid, const std::string& value) {
    nlohmann::json e = {{"name", what}, {"ph", "M"}, {"pid", rank}, {"args", {{"name", value}}}};
    if (tid >= 0) e["tid"] = tid;
    out.push_back(e);
  };
  name("process_name", -1, fmt::format("rank {}", rank));
  name("thread_name", 0, "compute");
  name("thread_name", 1, "communication");
  for (const TimelineEvent& e : events) {
    const bool comm = e.track == TimelineEvent::Track::communication;
    nlohmann::json args = {{"step", e.step}};
    if (e.unit >= 0) args["unit"] = e.unit;
    if (comm) args["bytes"] = e.bytes;
    out.push_back({{"name", e.name},
                   {"cat", comm ? "communication" : "compute"},
                   {"ph", "X"},
                   {"ts", 1e6 * e.start_s},
                   {"dur", 1e6 * (e.end_s - e.start_s)},
                   {"pid", rank},
                   {"tid", comm ? 1 : 0},
                   {"args", args}});
  }
  return out;
}

void write_trace(const std::string& path, const std::vector<std::string>& rank_events) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& text : rank_events)
    for (auto& e : nlohmann::json::parse(text)) all.push_back(std::move(e));
  const nlohmann::json trace = {{"traceEvents", all}, {"displayTimeUnit", "ms"}};
  write_file_atomically(path, trace.dump() + "\n");
}

}  // namespace dptrain
