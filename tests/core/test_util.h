// Small builders for core tests: clusters, queues and job specs without any files.
#pragma once

#include <gtest/gtest.h>

#include "core/model/cluster.h"
#include "core/model/job.h"
#include "core/model/queue.h"

namespace gantry::core::testing {

inline constexpr Ticks kS = kTicksPerSecond;
inline constexpr SharingMask kAll =
    Bit(Sharing::kExclusive) | Bit(Sharing::kMig) | Bit(Sharing::kMps) | Bit(Sharing::kTimeslice);

inline ModelId Model(const Catalog& c, const char* name) {
  auto m = c.Find(name);
  EXPECT_TRUE(m.has_value()) << name;
  return m.value_or(ModelId(0));
}

inline PoolSpec Pool(const Catalog& c, std::string name, int count, int gpus, const char* model,
                     int leaf_size = 0, int domains = 1,
                     SharingMask sharing = Bit(Sharing::kExclusive), bool spot = false) {
  PoolSpec p;
  p.name = std::move(name);
  p.count = count;
  p.gpus = gpus;
  if (model) p.model = Model(c, model);
  p.leaf_size = leaf_size;
  p.nvlink_domains = domains;
  p.cpus_milli = 128'000;
  p.memory_bytes = 1024 * kGB;
  p.sharing = sharing;
  p.spot = spot;
  return p;
}

inline Cluster MakeCluster(std::vector<PoolSpec> pools) {
  auto c = Cluster::Build("test", Catalog::BuiltIn(), std::move(pools));
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().ToString());
  return std::move(c).value();
}

inline QueueTree MakeQueues(std::vector<QueueSpec> specs) {
  auto q = QueueTree::Build(std::move(specs));
  EXPECT_TRUE(q.ok()) << (q.ok() ? "" : q.error().ToString());
  return std::move(q).value();
}

// A whole-GPU job of `replicas` x `gpus` on any model.
inline JobSpec Whole(const Catalog& c, std::string id, int replicas, int gpus,
                     Topology topology = Topology::kSpine) {
  JobSpec j;
  j.id = std::move(id);
  j.queue = QueueId(0);
  j.replicas = replicas;
  j.gpus = gpus;
  j.vram_bytes = 10 * kGB;
  j.topology = topology;
  j.models = c.size() >= 64 ? ~ModelMask{0} : (ModelMask{1} << c.size()) - 1;
  j.mig_index.assign(c.size(), -1);
  return j;
}

inline JobSpec Mig(const Catalog& c, std::string id, const char* profile) {
  JobSpec j = Whole(c, std::move(id), 1, 0);
  j.sharing = Sharing::kMig;
  j.mig_profile = profile;
  j.vram_bytes = 5 * kGB;
  for (size_t m = 0; m < c.size(); ++m) {
    j.mig_index[m] = static_cast<int8_t>(c.FindProfile(ModelId(static_cast<uint32_t>(m)), profile));
  }
  return j;
}

inline JobSpec Shared(const Catalog& c, std::string id, Sharing mode, int share_milli,
                      int64_t vram_gb) {
  JobSpec j = Whole(c, std::move(id), 1, 0);
  j.sharing = mode;
  j.share_milli = share_milli;
  j.vram_bytes = vram_gb * kGB;
  return j;
}

}  // namespace gantry::core::testing
