// Right-sizing advice: the smallest shape a pool offers that holds what was seen, with
// 20% headroom; nothing when the job already fits.
#include "core/advice.h"

#include "test_util.h"

namespace gantry::core {
namespace {

using testing::MakeCluster;
using testing::Pool;

class AdviceTest : public ::testing::Test {
 protected:
  Catalog cat_ = Catalog::BuiltIn();
  Cluster mig_mps_ =
      MakeCluster({Pool(cat_, "h100", 2, 8, "H100-80GB", 0, 1,
                        Bit(Sharing::kExclusive) | Bit(Sharing::kMig) | Bit(Sharing::kMps))});
  Cluster mps_only_ = MakeCluster(
      {Pool(cat_, "h100", 2, 8, "H100-80GB", 0, 1, Bit(Sharing::kExclusive) | Bit(Sharing::kMps))});
  Cluster whole_ = MakeCluster({Pool(cat_, "h100", 2, 8, "H100-80GB")});
  ModelId h100_ = testing::Model(cat_, "H100-80GB");

  JobSpec OneGpu(int64_t vram_gb) {
    JobSpec j = testing::Whole(cat_, "j", 1, 1);
    j.vram_bytes = vram_gb * kGB;
    return j;
  }
};

TEST_F(AdviceTest, AnEightyGigabyteAskThatUsedNineGetsTheMigProfileThatHoldsIt) {
  const Advice a = RightSize(mig_mps_, h100_, OneGpu(80), Observed{9 * kGB, 0.10});
  // 9 GB + 20% = 10.8 GB: more than 1g.10gb, within 1g.20gb (1/7 of the compute).
  EXPECT_EQ(a.shape, "MIG 1g.20gb");
  EXPECT_DOUBLE_EQ(a.gpus, 1.0);
  EXPECT_NEAR(a.fit_gpus, 1.0 / 7, 1e-12);
  EXPECT_NE(a.text.find("9.0 GB"), std::string::npos) << a.text;
  EXPECT_NE(a.text.find("86% fewer GPU-hours"), std::string::npos) << a.text;
}

TEST_F(AdviceTest, ComputeDecidesTooAndMpsWhereThereIsNoMig) {
  // 45% busy needs 0.54 GPU with headroom: 4g.40gb (4/7) on MIG, a 0.625 MPS share.
  EXPECT_EQ(RightSize(mig_mps_, h100_, OneGpu(80), Observed{9 * kGB, 0.45}).shape, "MIG 4g.40gb");
  const Advice mps = RightSize(mps_only_, h100_, OneGpu(80), Observed{9 * kGB, 0.45});
  EXPECT_EQ(mps.shape, "MPS share 0.625");
  EXPECT_DOUBLE_EQ(mps.fit_gpus, 0.625);
  // No sharing on the pool: nothing smaller than one GPU to offer.
  EXPECT_EQ(RightSize(whole_, h100_, OneGpu(80), Observed{9 * kGB, 0.10}).shape, "");
}

TEST_F(AdviceTest, WholeGpusShrinkToWhatWasUsedAndBusyJobsGetNothing) {
  JobSpec four = testing::Whole(cat_, "j", 1, 4);
  // 4 GPUs 30% busy: 1.44 GPUs' worth with headroom: 2 GPUs.
  const Advice a = RightSize(whole_, h100_, four, Observed{100 * kGB, 0.30});
  EXPECT_EQ(a.shape, "2 GPUs");
  EXPECT_DOUBLE_EQ(a.fit_gpus, 2);
  // VRAM needs 3 GPUs (200 GB + 20% over 80 GB each) even when compute needs fewer.
  EXPECT_EQ(RightSize(whole_, h100_, four, Observed{200 * kGB, 0.30}).shape, "3 GPUs");
  EXPECT_EQ(RightSize(whole_, h100_, four, Observed{300 * kGB, 0.90}).shape, "");
  EXPECT_EQ(RightSize(mig_mps_, h100_, OneGpu(80), Observed{70 * kGB, 0.95}).shape, "");
}

TEST_F(AdviceTest, SharedJobsGetASmallerShareOrInstance) {
  JobSpec mig = testing::Mig(cat_, "m", "3g.40gb");
  EXPECT_EQ(RightSize(mig_mps_, h100_, mig, Observed{8 * kGB, 0.10}).shape, "MIG 1g.10gb");
  JobSpec half = testing::Shared(cat_, "s", Sharing::kMps, 500, 40);
  EXPECT_EQ(RightSize(mps_only_, h100_, half, Observed{8 * kGB, 0.10}).shape, "MPS share 0.125");
  EXPECT_EQ(RightSize(mps_only_, h100_, half, Observed{30 * kGB, 0.40}).shape, "");
}

}  // namespace
}  // namespace gantry::core
