// JobBook: the jobs gantryd holds in memory and the indexes that must agree with them:
// by seq (submission order), by name and number, by array, by the scheduling core's id,
// the running ones (overall and per node), the jobs held for each job's end (--after),
// and the ended jobs kept in memory, oldest first. The store holds every job; the book
// holds the active ones and the last ended ones (ControllerOptions::recent_done).
// Thread-safety: none; the controller thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/model/types.h"
#include "server/state.h"

namespace gantry::server {

class JobBook {
 public:
  using Jobs = std::map<int64_t, Job>;  // by seq

  // Every job in memory, in submission order.
  Jobs& jobs() { return jobs_; }
  const Jobs& jobs() const { return jobs_; }
  // A job by its name, or by its number (Job::number: SLURM_JOB_ID, as Slurm's ids are
  // numbers) while in memory; "j12" and "12", "j41_3" and "41_3" are one job; an array's
  // number stands for the array.
  Job* Find(const std::string& name);
  // The name `name` stands for: itself when a job or array has it, else a number's job's
  // name (in memory), or the server's own "j" + number.
  std::string Resolve(const std::string& name) const;
  bool HasName(const std::string& name) const { return by_name_.count(name) > 0; }
  // An array's tasks in memory, in seq order; nullptr when none is.
  const std::vector<int64_t>* Array(const std::string& id) const;
  // The tasks in memory of the array `name` stands for (its id or number), where it names
  // no job; empty otherwise.
  std::vector<Job*> ArrayTasks(const std::string& name);
  // An array task's array's number (`%A`, SLURM_ARRAY_JOB_ID): its first task's seq.
  int64_t ArrayNumber(const Job& task) const;

  // Adds a job (its seq, name and array set) and indexes it.
  Job& Add(Job job);
  // Removes an ended job from memory (the store keeps it).
  void Drop(Jobs::iterator it);
  // Forgets every job (the store is read back).
  void Clear();
  // The seq the next submitted job gets, and taking it.
  int64_t next_seq() const { return next_seq_; }
  int64_t TakeSeq() { return next_seq_++; }
  void SetNextSeq(int64_t seq) { next_seq_ = seq; }

  // The core's ids: SetCore gives `job` its id in the core, ClearCore takes it away;
  // ByCore is the job of a core id that has one; HolderOf the same or nullptr.
  void SetCore(Job& job, core::JobId id);
  void ClearCore(Job& job);
  Job& ByCore(core::JobId id) { return jobs_.at(core_to_seq_[id.v]); }
  const Job* HolderOf(core::JobId id) const;

  // Running or stopping jobs, overall (seq order) and by node of their workers.
  void SetNodes(size_t nodes) { node_jobs_.assign(nodes, {}); }
  void AddRunning(const Job& job);
  void RemoveRunning(const Job& job);
  const std::set<int64_t>& running() const { return running_; }
  const std::set<int64_t>& OnNode(core::NodeId n) const { return node_jobs_[n.v]; }

  // Jobs held until job `name` ends (--after): added one by one, taken all at once.
  void AddDependent(const std::string& name, int64_t seq) { dependents_[name].push_back(seq); }
  std::vector<int64_t> TakeDependents(const std::string& name);
  // The same, left in place (a job's start settles those waiting for it to start).
  std::vector<int64_t> Dependents(const std::string& name) const {
    auto w = dependents_.find(name);
    return w == dependents_.end() ? std::vector<int64_t>() : w->second;
  }

  // Ended jobs in memory, oldest first: noted as they end; PopEndedBeyond gives the
  // oldest one's seq while more than `keep` are noted (it may have left memory already).
  void NoteEnded(int64_t seq) { done_order_.push_back(seq); }
  std::optional<int64_t> PopEndedBeyond(size_t keep);

 private:
  Jobs jobs_;
  std::unordered_map<std::string, int64_t> by_name_;                  // name -> seq
  std::unordered_map<int64_t, int64_t> by_number_;                    // number -> seq
  std::unordered_map<std::string, std::vector<int64_t>> arrays_;      // array id -> its tasks
  std::unordered_map<std::string, std::vector<int64_t>> dependents_;  // name -> held jobs
  std::vector<int64_t> core_to_seq_;                                  // core JobId -> seq
  std::set<int64_t> running_;
  std::vector<std::set<int64_t>> node_jobs_;  // by NodeId
  std::deque<int64_t> done_order_;
  int64_t next_seq_ = 1;
};

}  // namespace gantry::server
