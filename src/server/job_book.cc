#include "server/job_book.h"

#include <algorithm>

#include "spec/batch.h"

namespace gantry::server {

std::string JobBook::Resolve(const std::string& name) const {
  if (by_name_.count(name) || arrays_.count(name) || !spec::IsJobNumber(name)) return name;
  if (name.find('_') == std::string::npos) {
    // An array's number (SLURM_ARRAY_JOB_ID) stands for the array; a job's (SLURM_JOB_ID)
    // for the job, while gantryd has it in memory; the server's own name for it otherwise.
    if (arrays_.count("j" + name) || name.size() > 18) return "j" + name;
    const int64_t number = std::stoll(name);
    if (auto n = by_number_.find(number); n != by_number_.end()) {
      const Job& job = jobs_.at(n->second);
      return !job.array.empty() && ArrayNumber(job) == number ? job.array : job.name;
    }
    return "j" + name;
  }
  return "j" + name;  // an array task's: ARRAY_INDEX, as Slurm writes it
}

Job* JobBook::Find(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) it = by_name_.find(Resolve(name));
  if (it == by_name_.end()) return nullptr;
  auto j = jobs_.find(it->second);
  return j == jobs_.end() ? nullptr : &j->second;
}

const std::vector<int64_t>* JobBook::Array(const std::string& id) const {
  auto a = arrays_.find(id);
  return a == arrays_.end() ? nullptr : &a->second;
}

std::vector<Job*> JobBook::ArrayTasks(const std::string& name) {
  std::vector<Job*> out;
  if (by_name_.count(name)) return out;
  if (const std::vector<int64_t>* tasks = Array(Resolve(name))) {
    for (int64_t seq : *tasks) {
      if (auto t = jobs_.find(seq); t != jobs_.end()) out.push_back(&t->second);
    }
  }
  return out;
}

int64_t JobBook::ArrayNumber(const Job& task) const {
  if (task.array_number > 0) return task.array_number;
  // Stored before array_number was kept: a gantryd-named array (j41) has it in its name;
  // a user-named one (sweep), its first task's seq as gantryd has the tasks.
  if (auto number = spec::NumberOfGivenId(task.array)) return std::stoll(*number);
  const std::vector<int64_t>* tasks = Array(task.array);
  return tasks != nullptr && !tasks->empty() ? tasks->front() : task.seq;
}

Job& JobBook::Add(Job job) {
  Job& j = jobs_.emplace(job.seq, std::move(job)).first->second;
  by_name_[j.name] = j.seq;
  by_number_[j.Number()] = j.seq;
  if (!j.array.empty()) arrays_[j.array].push_back(j.seq);
  return j;
}

void JobBook::Drop(Jobs::iterator it) {
  by_name_.erase(it->second.name);
  by_number_.erase(it->second.Number());
  if (!it->second.array.empty()) {
    auto a = arrays_.find(it->second.array);
    if (a != arrays_.end()) {
      std::erase(a->second, it->second.seq);
      if (a->second.empty()) arrays_.erase(a);
    }
  }
  jobs_.erase(it);
}

void JobBook::Clear() {
  jobs_.clear();
  by_name_.clear();
  by_number_.clear();
  arrays_.clear();
  dependents_.clear();
  core_to_seq_.clear();
  running_.clear();
  for (std::set<int64_t>& on : node_jobs_) on.clear();
  done_order_.clear();
}

void JobBook::SetCore(Job& job, core::JobId id) {
  job.core = id;
  if (core_to_seq_.size() <= id.v) core_to_seq_.resize(id.v + 1, 0);
  core_to_seq_[id.v] = job.seq;
}

void JobBook::ClearCore(Job& job) {
  core_to_seq_[job.core.v] = 0;
  job.core = core::JobId();
}

const Job* JobBook::HolderOf(core::JobId id) const {
  if (!id.valid() || id.v >= core_to_seq_.size()) return nullptr;
  auto it = jobs_.find(core_to_seq_[id.v]);
  return it == jobs_.end() ? nullptr : &it->second;
}

void JobBook::AddRunning(const Job& job) {
  running_.insert(job.seq);
  for (const Worker& w : job.workers) node_jobs_[w.alloc.node.v].insert(job.seq);
}

void JobBook::RemoveRunning(const Job& job) {
  running_.erase(job.seq);
  for (const Worker& w : job.workers) node_jobs_[w.alloc.node.v].erase(job.seq);
}

std::vector<int64_t> JobBook::TakeDependents(const std::string& name) {
  auto w = dependents_.find(name);
  if (w == dependents_.end()) return {};
  std::vector<int64_t> waiting = std::move(w->second);
  dependents_.erase(w);
  return waiting;
}

std::optional<int64_t> JobBook::PopEndedBeyond(size_t keep) {
  if (done_order_.size() <= keep) return std::nullopt;
  const int64_t seq = done_order_.front();
  done_order_.pop_front();
  return seq;
}

}  // namespace gantry::server
