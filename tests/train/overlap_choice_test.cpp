// OverlapChoice (--overlap): the trial's schedule of on and off steps, the decision by the medians (on where they
// tie), and the fixed modes.
#include "dptrain/train/overlap_choice.hpp"

#include <gtest/gtest.h>

namespace dptrain {
namespace {

TEST(OverlapChoice, FixedModesNeverChangeAndRecordNothing) {
  for (const char* mode : {"on", "off"}) {
    OverlapChoice choice(mode);
    const bool expected = std::string(mode) == "on";
    for (int index = 0; index < 20; ++index) {
      EXPECT_EQ(choice.overlap_for_step(index), expected) << mode << " step " << index;
      EXPECT_FALSE(choice.record(index, 1.0 + index).has_value());
    }
    EXPECT_EQ(choice.summary(), (nlohmann::json{{"mode", mode}, {"overlap", expected}}));
  }
}

TEST(OverlapChoice, AutoAlternatesOnStepsTwoToSevenThenKeepsTheLowerMedian) {
  OverlapChoice choice("auto");
  EXPECT_TRUE(choice.overlap_for_step(0));  // the warm-up step, not timed
  EXPECT_FALSE(choice.record(0, 100.0).has_value());
  // With overlap: 0.50, 0.90 (an outlier), 0.52 s → median 0.52; without: 0.55, 0.51, 0.53 → median 0.53.
  const double times[] = {0.50, 0.55, 0.90, 0.51, 0.52, 0.53};
  for (int index = 1; index <= 6; ++index) {
    EXPECT_EQ(choice.overlap_for_step(index), index % 2 == 1) << "trial step " << index;
    const auto line = choice.record(index, times[index - 1]);
    EXPECT_EQ(line.has_value(), index == 6) << "trial step " << index;
    if (line) {
      EXPECT_EQ(*line,
                "dptrain | overlap auto: on from here (median step 520.0 ms with overlap, 530.0 ms without, over 3 "
                "steps each)");
    }
  }
  for (int index = 7; index < 12; ++index) {
    EXPECT_TRUE(choice.overlap_for_step(index));
    EXPECT_FALSE(choice.record(index, 5.0).has_value());  // later steps change nothing
  }
  const nlohmann::json summary = choice.summary();
  EXPECT_EQ(summary["decided"], true);
  EXPECT_EQ(summary["overlap"], true);
  EXPECT_EQ(summary["trial_on_ms"].get<std::vector<double>>(), (std::vector<double>{500.0, 900.0, 520.0}));
  EXPECT_EQ(summary["trial_off_ms"].get<std::vector<double>>(), (std::vector<double>{550.0, 510.0, 530.0}));
}

TEST(OverlapChoice, AutoTurnsOverlapOffWhenWithoutIsFasterAndKeepsItOnWhereTheyTie) {
  OverlapChoice slower_with("auto"), tie("auto");
  for (int index = 1; index <= 6; ++index) {
    slower_with.record(index, index % 2 == 1 ? 0.7 : 0.6);
    tie.record(index, 0.6);
  }
  EXPECT_FALSE(slower_with.overlap());
  EXPECT_FALSE(slower_with.overlap_for_step(7));
  EXPECT_TRUE(tie.overlap());
  EXPECT_TRUE(tie.overlap_for_step(7));
}

TEST(OverlapChoice, ARunThatEndsInsideTheTrialHasDecidedNothing) {
  OverlapChoice choice("auto");
  for (int index = 0; index <= 3; ++index) choice.record(index, 0.5 + index);
  EXPECT_TRUE(choice.overlap());
  EXPECT_EQ(choice.summary()["decided"], false);
  EXPECT_EQ(choice.summary()["trial_on_ms"].size(), 2u);
  EXPECT_EQ(choice.summary()["trial_off_ms"].size(), 1u);
}

}  // namespace
}  // namespace dptrain
