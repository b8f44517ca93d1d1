// Tests for Catalog: the built-in models against NVIDIA's published MIG tables, the
// placements against NVIDIA's documented layouts, and Add()'s rejections.
//
// The expected tables and the layout checker below are written out independently of
// catalog.cc (no shared helpers), so a slip in the catalog cannot hide in the test.

#include "core/model/catalog.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gantry::core {
namespace {

struct ExpectedProfile {
  const char* name;
  int compute_slices;
  int memory_slices;
  int64_t memory_gb;
  int max_instances;
  std::vector<int> starts;
};

struct ExpectedModel {
  const char* name;
  int64_t memory_gb;
  std::vector<ExpectedProfile> profiles;
};

const std::vector<int> kAny1 = {0, 1, 2, 3, 4, 5, 6};
const std::vector<int> kEven = {0, 2, 4, 6};
const std::vector<int> kTwoG = {0, 2, 4};
const std::vector<int> kHalves = {0, 4};
const std::vector<int> kZero = {0};

// NVIDIA MIG user guide, "Supported MIG Profiles" (instance counts) and
// `nvidia-smi mig -lgipp` (placements as {starts}:memory slices).
// One row per profile, laid out like NVIDIA's tables.
// clang-format off
std::vector<ExpectedModel> Expected() {
  return {
      {"A100-40GB", 40,
       {{"1g.5gb", 1, 1, 5, 7, kAny1},
        {"1g.10gb", 1, 2, 10, 4, kEven},
        {"2g.10gb", 2, 2, 10, 3, kTwoG},
        {"3g.20gb", 3, 4, 20, 2, kHalves},
        {"4g.20gb", 4, 4, 20, 1, kZero},
        {"7g.40gb", 7, 8, 40, 1, kZero}}},
      {"A100-80GB", 80,
       {{"1g.10gb", 1, 1, 10, 7, kAny1},
        {"1g.20gb", 1, 2, 20, 4, kEven},
        {"2g.20gb", 2, 2, 20, 3, kTwoG},
        {"3g.40gb", 3, 4, 40, 2, kHalves},
        {"4g.40gb", 4, 4, 40, 1, kZero},
        {"7g.80gb", 7, 8, 80, 1, kZero}}},
      {"H100-80GB", 80,
       {{"1g.10gb", 1, 1, 10, 7, kAny1},
        {"1g.20gb", 1, 2, 20, 4, kEven},
        {"2g.20gb", 2, 2, 20, 3, kTwoG},
        {"3g.40gb", 3, 4, 40, 2, kHalves},
        {"4g.40gb", 4, 4, 40, 1, kZero},
        {"7g.80gb", 7, 8, 80, 1, kZero}}},
      {"H100-94GB", 94,
       {{"1g.12gb", 1, 1, 12, 7, kAny1},
        {"1g.24gb", 1, 2, 24, 4, kEven},
        {"2g.24gb", 2, 2, 24, 3, kTwoG},
        {"3g.47gb", 3, 4, 47, 2, kHalves},
        {"4g.47gb", 4, 4, 47, 1, kZero},
        {"7g.94gb", 7, 8, 94, 1, kZero}}},
      {"H200-141GB", 141,
       {{"1g.18gb", 1, 1, 18, 7, kAny1},
        {"1g.35gb", 1, 2, 35, 4, kEven},
        {"2g.35gb", 2, 2, 35, 3, kTwoG},
        {"3g.71gb", 3, 4, 71, 2, kHalves},
        {"4g.71gb", 4, 4, 71, 1, kZero},
        {"7g.141gb", 7, 8, 141, 1, kZero}}},
      {"B200-180GB", 180,
       {{"1g.23gb", 1, 1, 23, 7, kAny1},
        {"1g.45gb", 1, 2, 45, 4, kEven},
        {"2g.45gb", 2, 2, 45, 3, kTwoG},
        {"3g.90gb", 3, 4, 90, 2, kHalves},
        {"4g.90gb", 4, 4, 90, 1, kZero},
        {"7g.180gb", 7, 8, 180, 1, kZero}}},
      {"L40S-48GB", 48, {}},
      {"L4-24GB", 24, {}},
      {"T4-16GB", 16, {}},
      {"A10-24GB", 24, {}},
      {"V100-16GB", 16, {}},
      {"V100-32GB", 32, {}},
  };
}
// clang-format on

const GpuModel& MustFind(const Catalog& catalog, const std::string& name) {
  std::optional<ModelId> id = catalog.Find(name);
  EXPECT_TRUE(id.has_value()) << name;
  return catalog.model(id.value_or(ModelId(0)));
}

// One instance in a layout: profile name and first memory slice.
using Layout = std::vector<std::pair<std::string, int>>;

// Empty when `layout` is a valid set of instances on one GPU of `model`: every
// placement listed for its profile, no two sharing a memory slice, compute within 7.
std::string CheckLayout(const GpuModel& model, const Layout& layout) {
  uint32_t used = 0;
  int compute = 0;
  for (const auto& [name, start] : layout) {
    const MigProfile* p = nullptr;
    for (const MigProfile& candidate : model.mig_profiles) {
      if (candidate.name == name) p = &candidate;
    }
    if (p == nullptr) return "no profile " + name;
    bool allowed = false;
    for (int s : p->starts) allowed = allowed || s == start;
    if (!allowed) return name + " may not start at " + std::to_string(start);
    uint32_t mask = ((1u << p->memory_slices) - 1u) << start;
    if ((used & mask) != 0) return name + " at " + std::to_string(start) + " overlaps";
    used |= mask;
    compute += p->compute_slices;
  }
  if (compute > kMigComputeSlices) return "compute slices " + std::to_string(compute);
  return "";
}

// Most instances of `p` that fit together, by exhaustive search over its starts.
int MostInstances(const MigProfile& p, size_t from = 0, uint32_t used = 0) {
  int best = 0;
  for (size_t i = from; i < p.starts.size(); ++i) {
    uint32_t mask = ((1u << p.memory_slices) - 1u) << p.starts[i];
    if ((used & mask) != 0) continue;
    best = std::max(best, 1 + MostInstances(p, i + 1, used | mask));
  }
  // Compute slices cap the count too, whatever memory allows.
  return std::min(best, kMigComputeSlices / p.compute_slices);
}

TEST(CatalogBuiltIn, HasExactlyTheDocumentedModels) {
  const Catalog catalog = Catalog::BuiltIn();
  const std::vector<ExpectedModel> expected = Expected();
  ASSERT_EQ(catalog.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    const GpuModel& m = catalog.model(ModelId(static_cast<uint32_t>(i)));
    EXPECT_EQ(m.name, expected[i].name);
    EXPECT_EQ(m.memory_bytes, expected[i].memory_gb * 1'000'000'000) << m.name;
    EXPECT_TRUE(m.builtin) << m.name;
    EXPECT_EQ(catalog.Find(expected[i].name), ModelId(static_cast<uint32_t>(i)));
  }
}

TEST(CatalogBuiltIn, MigTablesMatchNvidia) {
  const Catalog catalog = Catalog::BuiltIn();
  for (const ExpectedModel& e : Expected()) {
    const GpuModel& m = MustFind(catalog, e.name);
    EXPECT_EQ(m.mig_capable(), !e.profiles.empty()) << e.name;
    ASSERT_EQ(m.mig_profiles.size(), e.profiles.size()) << e.name;
    for (size_t i = 0; i < e.profiles.size(); ++i) {
      const MigProfile& p = m.mig_profiles[i];
      const ExpectedProfile& x = e.profiles[i];
      SCOPED_TRACE(std::string(e.name) + " " + x.name);
      EXPECT_EQ(p.name, x.name);
      EXPECT_EQ(p.compute_slices, x.compute_slices);
      EXPECT_EQ(p.memory_slices, x.memory_slices);
      EXPECT_EQ(p.memory_bytes, x.memory_gb * kGB);
      EXPECT_EQ(p.max_instances, x.max_instances);
      EXPECT_EQ(p.starts, x.starts);
    }
  }
}

TEST(CatalogBuiltIn, EveryMigTablePassesTheChecks) {
  const Catalog catalog = Catalog::BuiltIn();
  for (size_t i = 0; i < catalog.size(); ++i) {
    const GpuModel& m = catalog.model(ModelId(static_cast<uint32_t>(i)));
    Status s = Catalog::CheckMigTable(m);
    EXPECT_TRUE(s.ok()) << m.name << ": " << (s.ok() ? "" : s.error().ToString());
  }
}

TEST(CatalogBuiltIn, DocumentedInstanceCountsAreExactlyAchievable) {
  const Catalog catalog = Catalog::BuiltIn();
  for (size_t i = 0; i < catalog.size(); ++i) {
    const GpuModel& m = catalog.model(ModelId(static_cast<uint32_t>(i)));
    for (const MigProfile& p : m.mig_profiles) {
      EXPECT_EQ(MostInstances(p), p.max_instances) << m.name << " " << p.name;
    }
  }
}

TEST(CatalogBuiltIn, SevenSmallestInstancesFitAtStartsZeroToSix) {
  const Catalog catalog = Catalog::BuiltIn();
  const GpuModel& a100 = MustFind(catalog, "A100-40GB");
  Layout seven;
  for (int s = 0; s < 7; ++s) seven.emplace_back("1g.5gb", s);
  EXPECT_EQ(CheckLayout(a100, seven), "");
  seven.emplace_back("1g.5gb", 7);  // an eighth has nowhere to go
  EXPECT_NE(CheckLayout(a100, seven), "");
}

// Layouts NVIDIA documents as valid, named by shape so that every MIG model is tried.
TEST(CatalogBuiltIn, ClassicMixedLayoutsAreValidOnEveryMigModel) {
  const Catalog catalog = Catalog::BuiltIn();
  for (size_t i = 0; i < catalog.size(); ++i) {
    const GpuModel& m = catalog.model(ModelId(static_cast<uint32_t>(i)));
    if (!m.mig_capable()) continue;
    ASSERT_EQ(m.mig_profiles.size(), 6u) << m.name;
    const std::string g1 = m.mig_profiles[0].name;   // 1g, one memory slice
    const std::string g1l = m.mig_profiles[1].name;  // 1g, two memory slices
    const std::string g2 = m.mig_profiles[2].name;
    const std::string g3 = m.mig_profiles[3].name;
    const std::string g4 = m.mig_profiles[4].name;
    const std::string g7 = m.mig_profiles[5].name;
    const std::vector<Layout> valid = {
        {{g7, 0}},
        {{g4, 0}, {g2, 4}, {g1, 6}},
        {{g4, 0}, {g3, 4}},  // supported since driver R510
        {{g3, 0}, {g3, 4}},
        {{g3, 0}, {g2, 4}, {g1, 6}},
        {{g2, 0}, {g2, 2}, {g3, 4}},
        {{g3, 4}, {g1, 0}, {g1, 1}, {g1, 2}, {g1, 3}},
        {{g2, 0}, {g2, 2}, {g2, 4}, {g1, 6}},
        {{g2, 0}, {g1, 2}, {g1, 3}, {g1, 4}, {g1, 5}, {g1, 6}},
        {{g1l, 0}, {g1l, 2}, {g1l, 4}, {g1l, 6}},
        {{g1, 0}, {g1, 1}, {g1, 2}, {g1, 3}, {g1, 4}, {g1, 5}, {g1, 6}},
    };
    for (const Layout& layout : valid) {
      std::string why = CheckLayout(m, layout);
      EXPECT_EQ(why, "") << m.name << " layout starting " << layout[0].first;
    }
    const std::vector<Layout> invalid = {
        {{g3, 0}, {g4, 0}},  // overlap
        {{g4, 0}, {g2, 2}},  // overlap
        {{g2, 1}},           // 2g starts on even slices only
        {{g3, 2}},           // 3g starts at 0 or 4 only
        {{g4, 4}},           // 4g starts at 0 only
        {{g1, 7}},           // slice 7 takes no one-slice instance
        {{g1l, 1}},          // two-slice 1g starts on even slices only
        {{g7, 0}, {g1, 0}},  // 7g takes the whole GPU
    };
    for (const Layout& layout : invalid) {
      EXPECT_NE(CheckLayout(m, layout), "") << m.name << " layout starting " << layout[0].first;
    }
  }
}

TEST(CatalogFind, IsExactWithoutAliases) {
  const Catalog catalog = Catalog::BuiltIn();
  EXPECT_TRUE(catalog.Find("H100-80GB").has_value());
  EXPECT_FALSE(catalog.Find("H100").has_value());
  EXPECT_FALSE(catalog.Find("h100-80gb").has_value());
  EXPECT_FALSE(catalog.Find("H100-80GB ").has_value());
  EXPECT_FALSE(catalog.Find("").has_value());
}

TEST(CatalogFindProfile, HitsAndMisses) {
  const Catalog catalog = Catalog::BuiltIn();
  const ModelId h100 = *catalog.Find("H100-80GB");
  const ModelId a100 = *catalog.Find("A100-40GB");
  const ModelId t4 = *catalog.Find("T4-16GB");
  EXPECT_EQ(catalog.FindProfile(h100, "1g.10gb"), 0);
  EXPECT_EQ(catalog.FindProfile(h100, "3g.40gb"), 3);
  EXPECT_EQ(catalog.FindProfile(h100, "7g.80gb"), 5);
  EXPECT_EQ(catalog.FindProfile(a100, "1g.10gb"), 1);      // A100-40GB's two-slice 1g
  EXPECT_EQ(catalog.FindProfile(h100, "3g.20gb"), -1);     // another model's profile
  EXPECT_EQ(catalog.FindProfile(h100, "1g.10gb+me"), -1);  // +me variants not modelled
  EXPECT_EQ(catalog.FindProfile(h100, "3G.40GB"), -1);
  EXPECT_EQ(catalog.FindProfile(h100, ""), -1);
  EXPECT_EQ(catalog.FindProfile(t4, "1g.5gb"), -1);
  EXPECT_EQ(catalog.FindProfile(ModelId(), "1g.10gb"), -1);
  EXPECT_EQ(catalog.FindProfile(ModelId(1000), "1g.10gb"), -1);
}

GpuModel Plain(std::string name, int64_t memory_gb) {
  GpuModel m;
  m.name = std::move(name);
  m.memory_bytes = memory_gb * kGB;
  return m;
}

// A valid MIG model (the A100-40GB table under another name), for mutating one field.
GpuModel MigModel() {
  GpuModel m = MustFind(Catalog::BuiltIn(), "A100-40GB");
  m.name = "A100X";
  return m;
}

void ExpectAddError(const GpuModel& model, const std::string& field,
                    const std::string& message_part) {
  Catalog catalog = Catalog::BuiltIn();
  Result<ModelId> r = catalog.Add(model);
  ASSERT_FALSE(r.ok()) << model.name;
  EXPECT_EQ(r.error().field, field);
  EXPECT_NE(r.error().message.find(message_part), std::string::npos)
      << "message: " << r.error().message;
  EXPECT_EQ(catalog.size(), 12u);  // nothing added on error
}

TEST(CatalogAdd, AcceptsAConfigModel) {
  Catalog catalog = Catalog::BuiltIn();
  Result<ModelId> r = catalog.Add(Plain("V100M32", 32));
  ASSERT_TRUE(r.ok()) << r.error().ToString();
  EXPECT_EQ(*r, ModelId(12));
  EXPECT_EQ(catalog.Find("V100M32"), *r);
  EXPECT_FALSE(catalog.model(*r).builtin);
  EXPECT_EQ(catalog.model(*r).memory_bytes, 32 * kGB);

  Result<ModelId> mig = catalog.Add(MigModel());
  ASSERT_TRUE(mig.ok()) << mig.error().ToString();
  EXPECT_EQ(catalog.FindProfile(*mig, "3g.20gb"), 3);
}

TEST(CatalogAdd, RejectsBadNamesAndMemory) {
  ExpectAddError(Plain("", 32), "name", "must not be empty");
  ExpectAddError(Plain("H100-80GB", 80), "name", "duplicate GPU model \"H100-80GB\"");
  ExpectAddError(Plain("V100M32", 0), "memory_gb", "must be positive, got 0");
  ExpectAddError(Plain("V100M32", -16), "memory_gb", "must be positive, got -16");
  GpuModel half = Plain("V100M32", 0);
  half.memory_bytes = -kGB / 2;
  ExpectAddError(half, "memory_gb", "got -0.5");
}

TEST(CatalogAdd, RejectsTheSameNameTwice) {
  Catalog catalog = Catalog::BuiltIn();
  ASSERT_TRUE(catalog.Add(Plain("V100M32", 32)).ok());
  Result<ModelId> again = catalog.Add(Plain("V100M32", 32));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().field, "name");
}

TEST(CatalogAdd, RejectsMoreThanMaxModels) {
  Catalog catalog = Catalog::BuiltIn();
  while (catalog.size() < static_cast<size_t>(kMaxModels)) {
    ASSERT_TRUE(catalog.Add(Plain("M" + std::to_string(catalog.size()), 8)).ok());
  }
  Result<ModelId> r = catalog.Add(Plain("OneTooMany", 8));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("at most 64"), std::string::npos) << r.error().message;
  EXPECT_EQ(catalog.size(), static_cast<size_t>(kMaxModels));
}

TEST(CatalogAdd, RejectsBadMigTables) {
  {
    GpuModel m = MigModel();
    m.mig_profiles[0].compute_slices = 5;
    ExpectAddError(m, "mig_profiles[1g.5gb].compute_slices", "must be 1, 2, 3, 4 or 7, got 5");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[0].compute_slices = 0;
    ExpectAddError(m, "mig_profiles[1g.5gb].compute_slices", "got 0");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[3].memory_slices = 0;
    ExpectAddError(m, "mig_profiles[3g.20gb].memory_slices", "must be 1 to 8, got 0");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[5].memory_slices = 9;
    ExpectAddError(m, "mig_profiles[7g.40gb].memory_slices", "got 9");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[3].starts = {0, 5};  // 5 + 4 slices runs past slice 7
    ExpectAddError(m, "mig_profiles[3g.20gb].starts", "start 5 with 4 memory slices");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[0].starts = {-1, 0, 1};
    ExpectAddError(m, "mig_profiles[1g.5gb].starts", "start -1");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[0].starts = {0, 1, 7};  // a one-slice instance at 7 would fit the rule
    m.mig_profiles[0].max_instances = 3;
    Catalog catalog = Catalog::BuiltIn();
    EXPECT_TRUE(catalog.Add(m).ok());
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[0].starts.clear();
    ExpectAddError(m, "mig_profiles[1g.5gb].starts", "at least one placement");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[2].starts = {0, 4, 2};
    ExpectAddError(m, "mig_profiles[2g.10gb].starts", "strictly increasing, got 2 after 4");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[2].starts = {0, 2, 2};
    ExpectAddError(m, "mig_profiles[2g.10gb].starts", "strictly increasing");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[4].max_instances = 0;
    ExpectAddError(m, "mig_profiles[4g.20gb].max_instances", "must be at least 1, got 0");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[2].max_instances = 4;  // 4 x 2g = 8 compute slices
    ExpectAddError(m, "mig_profiles[2g.10gb].max_instances", "exceed the GPU's 7");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[3].max_instances = 3;  // 3 x 3g = 9 compute slices
    ExpectAddError(m, "mig_profiles[3g.20gb].max_instances", "exceed the GPU's 7");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[1].starts = {0, 1, 2, 3};  // two-slice placements 0,1,2,3 overlap
    ExpectAddError(m, "mig_profiles[1g.10gb].max_instances",
                   "4 instances cannot be placed without overlap; the starts fit 2");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[0].memory_bytes = 0;
    ExpectAddError(m, "mig_profiles[1g.5gb].memory_gb", "must be positive, got 0");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[5].memory_bytes = 41 * kGB;
    ExpectAddError(m, "mig_profiles[7g.40gb].memory_gb", "must not exceed the GPU's 40 GB");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[1].name = "1g.5gb";
    ExpectAddError(m, "mig_profiles[1g.5gb].name", "duplicate MIG profile");
  }
  {
    GpuModel m = MigModel();
    m.mig_profiles[2].name = "";
    ExpectAddError(m, "mig_profiles[2].name", "must not be empty");
  }
  {
    GpuModel m = MigModel();
    while (m.mig_profiles.size() <= static_cast<size_t>(kMaxMigProfiles)) {
      MigProfile p = m.mig_profiles[0];
      p.name = "x" + std::to_string(m.mig_profiles.size());
      m.mig_profiles.push_back(p);
    }
    ExpectAddError(m, "mig_profiles", "at most 32 profiles");
  }
}

}  // namespace
}  // namespace gantry::core
