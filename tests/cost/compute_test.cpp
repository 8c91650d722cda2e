// FLOPs, compute time, step times, MFU and the overlap simulation, against hand-computed values.
#include <gtest/gtest.h>

#include <vector>

#include "dptrain/cost/compute.hpp"
#include "dptrain/cost/format.hpp"

namespace dptrain::cost {
namespace {

const ModelShape kLlama{6'738'149'376, 32, 4096, 4096, 1'048'576};
constexpr double kPeak = 989e12, kEta = 0.473;

TEST(Compute, FlopsPerTokenIsSixNPlusTwelveLHQ) {
  // 6·6,738,149,376 + 12·32·4096·4096 = 40,428,896,256 + 6,442,450,944
  EXPECT_DOUBLE_EQ(model_flops_per_token(kLlama), 46'871'347'200.0);
  EXPECT_DOUBLE_EQ(model_flops_per_step(kLlama), 46'871'347'200.0 * 1'048'576);
  EXPECT_DOUBLE_EQ(model_flops_per_token(ModelShape{100, 2, 8, 16, 1}), 600 + 12 * 2 * 8 * 16);
}

TEST(Compute, ComputeTimeAndMfu) {
  EXPECT_DOUBLE_EQ(compute_seconds(8e12, 2, 1e12, 0.5), 8.0);  // 8e12 / (2·1e12·0.5)
  EXPECT_DOUBLE_EQ(mfu(8e12, 8.0, 2, 1e12), 0.5);
  EXPECT_DOUBLE_EQ(mfu(8e12, 16.0, 2, 1e12), 0.25);
}

TEST(Compute, HiddenFractionOfCommunication) {
  EXPECT_EQ(hidden_fraction(1.0, 4.0), 0.75);
  EXPECT_EQ(hidden_fraction(4.0, 4.0), 0.0);
  EXPECT_EQ(hidden_fraction(0.0, 4.0), 1.0);
  EXPECT_EQ(hidden_fraction(0.0, 0.0), 0.0);  // no communication: nothing hidden, no division by zero
  EXPECT_EQ(hidden_fraction(6.0, 4.0), 0.0);  // a wait longer than the collectives: nothing hidden
}

TEST(Compute, StepWaitsOrOverlaps) {
  // 12e12 FLOPs on 2 devices of 1e12 at η = 0.5: compute 12 s, backward 8 s.
  const StepTime hidden = model_step(12e12, 2, 1e12, 0.5, 3.0);
  EXPECT_DOUBLE_EQ(hidden.compute_s, 12.0);
  EXPECT_DOUBLE_EQ(hidden.backward_s, 8.0);
  EXPECT_DOUBLE_EQ(hidden.waiting_step_s, 15.0);
  EXPECT_DOUBLE_EQ(hidden.overlapped_step_s, 12.0);
  EXPECT_DOUBLE_EQ(hidden.exposed_comm_s(), 0.0);
  EXPECT_DOUBLE_EQ(hidden.waiting_mfu, 12e12 / 15.0 / 2e12);  // 0.4
  EXPECT_DOUBLE_EQ(hidden.overlapped_mfu, 0.5);               // = η when comm hides in backward

  const StepTime exposed = model_step(12e12, 2, 1e12, 0.5, 10.0);  // 2 s outlast the backward pass
  EXPECT_DOUBLE_EQ(exposed.waiting_step_s, 22.0);
  EXPECT_DOUBLE_EQ(exposed.overlapped_step_s, 14.0);
  EXPECT_DOUBLE_EQ(exposed.overlapped_mfu, 12e12 / 14.0 / 2e12);
}

TEST(Compute, LlamaOn8H100OverNvlink) {
  const double comm = 14 * 5e-6 + 1.75 * 2 * 6'738'149'376.0 / 450e9;  // ring all-reduce of M
  const StepTime step = model_step(model_flops_per_step(kLlama), 8, kPeak, kEta, comm);
  const double compute = 46'871'347'200.0 * 1'048'576 / (8 * kPeak * kEta);
  EXPECT_DOUBLE_EQ(step.compute_s, compute);
  EXPECT_DOUBLE_EQ(step.waiting_step_s, compute + comm);
  EXPECT_DOUBLE_EQ(step.overlapped_step_s, compute);
  EXPECT_DOUBLE_EQ(step.waiting_mfu, kEta * compute / (compute + comm));
  EXPECT_DOUBLE_EQ(step.overlapped_mfu, kEta);
  EXPECT_EQ(format_seconds(step.compute_s), "13.13 s");
  EXPECT_EQ(format_seconds(step.waiting_step_s), "13.19 s");
  EXPECT_EQ(format_percent(step.waiting_mfu), "47.1%");
  EXPECT_EQ(format_percent(step.overlapped_mfu), "47.3%");
}

TEST(Compute, OverlapSimulationHandExample) {
  // Units become ready at 2, 3, 6; comm takes 2, 3, 1.
  //   unit 0: starts 2 (ready), ends 4
  //   unit 1: ready 3 but the stream is busy until 4: starts 4, ends 7
  //   unit 2: ready 6, stream busy until 7: starts 7, ends 8
  // Backward ends at 6, so 2 s of communication are exposed.
  const std::vector<double> backward = {2, 1, 3}, comm = {2, 3, 1};
  const OverlapTimeline timeline = simulate_overlap(backward, comm);
  EXPECT_EQ(timeline.ready_s, (std::vector<double>{2, 3, 6}));
  EXPECT_EQ(timeline.comm_start_s, (std::vector<double>{2, 4, 7}));
  EXPECT_EQ(timeline.comm_end_s, (std::vector<double>{4, 7, 8}));
  EXPECT_DOUBLE_EQ(timeline.backward_end_s, 6);
  EXPECT_DOUBLE_EQ(timeline.exposed_comm_s, 2);
}

TEST(Compute, OverlapSimulationFullyHiddenAndEmpty) {
  const std::vector<double> backward = {3, 3, 3}, comm = {1, 1, 1};
  EXPECT_DOUBLE_EQ(simulate_overlap(backward, comm).exposed_comm_s, 1.0);  // only the last unit's collective
  const std::vector<double> early = {0, 0, 9}, small = {1, 1, 0};
  EXPECT_DOUBLE_EQ(simulate_overlap(early, small).exposed_comm_s, 0.0);  // all done at 2, backward ends at 9
  const OverlapTimeline none = simulate_overlap({}, {});
  EXPECT_EQ(none.exposed_comm_s, 0);
  EXPECT_EQ(none.backward_end_s, 0);
}

TEST(Compute, OverlapSimulationRejectsMismatchedUnits) {
  const std::vector<double> two = {1, 1}, three = {1, 1, 1};
  EXPECT_THROW(simulate_overlap(two, three), std::logic_error);
}

}  // namespace
}  // namespace dptrain::cost
