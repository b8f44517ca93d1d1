// The Controller's parts on their own: the jobs' book, the nodes' book, the agents'
// watches, the mailbox.
// (The Controller's tests drive them together; these pin each part's own contract.)
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "server/job_book.h"
#include "server/mailbox.h"
#include "server/node_book.h"
#include "server/node_watches.h"

namespace gantry::server {
namespace {

Job MakeJob(int64_t seq, std::string name, std::string array = "", int index = -1) {
  Job j;
  j.seq = seq;
  j.name = std::move(name);
  j.array = std::move(array);
  j.array_index = index;
  return j;
}

TEST(JobBook, NumbersStandForTheirJobsAndAnArraysFirstTaskForTheArray) {
  JobBook book;
  book.Add(MakeJob(7, "train"));
  book.Add(MakeJob(8, "sweep_0", "sweep", 0));
  book.Add(MakeJob(9, "sweep_1", "sweep", 1));
  EXPECT_EQ(book.Find("7")->name, "train");  // SLURM_JOB_ID
  EXPECT_EQ(book.Find("train")->seq, 7);
  EXPECT_EQ(book.Resolve("8"), "sweep");  // the array's number: its first task's
  EXPECT_EQ(book.Resolve("9"), "sweep_1");
  EXPECT_EQ(book.Resolve("41_3"), "j41_3");  // an array task not in memory: the server's name
  EXPECT_EQ(book.Resolve("12"), "j12");
  ASSERT_NE(book.Array("sweep"), nullptr);
  EXPECT_EQ(*book.Array("sweep"), (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(book.Find("nothing"), nullptr);
}

TEST(JobBook, AnArrayTaskHasItsOwnNumberAndTheArraysGoesWithItsLastTask) {
  // As Slurm numbers them: array 10's tasks 0, 1, 2 are 11, 12 and 10.
  JobBook book;
  for (int k = 0; k < 3; ++k) {
    Job t = MakeJob(10 + k, "j10_" + std::to_string(k), "j10", k);
    t.array_number = 10;
    t.number = k < 2 ? t.seq + 1 : 10;
    book.Add(std::move(t));
  }
  book.Add(MakeJob(13, "after"));
  EXPECT_EQ(book.Resolve("10"), "j10");  // the array's number: the array
  EXPECT_EQ(book.Resolve("11"), "j10_0");
  EXPECT_EQ(book.Resolve("12"), "j10_1");
  EXPECT_EQ(book.Resolve("13"), "after");
  EXPECT_EQ(book.Find("12")->array_index, 1);
  EXPECT_EQ(book.ArrayNumber(*book.Find("j10_2")), 10);
  book.Drop(book.jobs().find(10));  // task 0 leaves memory: its number with it
  EXPECT_EQ(book.Resolve("11"), "j11");
  EXPECT_EQ(book.Resolve("12"), "j10_1");
}

TEST(JobBook, ADroppedJobLeavesEveryIndex) {
  JobBook book;
  book.SetNodes(2);
  Job& a = book.Add(MakeJob(1, "a_0", "a", 0));
  book.SetCore(a, core::JobId(3));
  EXPECT_EQ(&book.ByCore(core::JobId(3)), &a);
  EXPECT_EQ(book.HolderOf(core::JobId(3)), &a);
  book.ClearCore(a);
  EXPECT_FALSE(a.core.valid());
  EXPECT_EQ(book.HolderOf(core::JobId(3)), nullptr);
  book.Drop(book.jobs().find(1));
  EXPECT_EQ(book.Find("a_0"), nullptr);
  EXPECT_EQ(book.Array("a"), nullptr);  // its last task gone: the array too
  EXPECT_FALSE(book.HasName("a_0"));
}

TEST(JobBook, RunningJobsAreIndexedByEveryNodeTheyHoldAndDependentsAreTakenOnce) {
  JobBook book;
  book.SetNodes(3);
  Job j = MakeJob(4, "gang");
  j.workers.resize(2);
  j.workers[0].alloc.node = core::NodeId(0);
  j.workers[1].alloc.node = core::NodeId(2);
  const Job& g = book.Add(std::move(j));
  book.AddRunning(g);
  EXPECT_EQ(book.running().count(4), 1U);
  EXPECT_EQ(book.OnNode(core::NodeId(2)).count(4), 1U);
  EXPECT_TRUE(book.OnNode(core::NodeId(1)).empty());
  book.RemoveRunning(g);
  EXPECT_TRUE(book.running().empty() && book.OnNode(core::NodeId(0)).empty());
  book.AddDependent("gang", 5);
  book.AddDependent("gang", 6);
  EXPECT_EQ(book.TakeDependents("gang"), (std::vector<int64_t>{5, 6}));
  EXPECT_TRUE(book.TakeDependents("gang").empty());
}

TEST(JobBook, EndedJobsBeyondTheKeptNumberComeOutOldestFirst) {
  JobBook book;
  for (int64_t seq : {3, 1, 2}) book.NoteEnded(seq);
  EXPECT_EQ(book.PopEndedBeyond(1), 3);
  EXPECT_EQ(book.PopEndedBeyond(1), 1);
  EXPECT_EQ(book.PopEndedBeyond(1), std::nullopt);
}

TEST(NodeBook, ANodeTakesWorkWhileItsAgentIsUpUndrainedAndNoUnreadStopHoldsIt) {
  NodeBook nodes;
  nodes.Reset(3);
  const core::NodeId a(0), b(1), c(2);
  EXPECT_FALSE(nodes.Usable(a));  // never heard from
  for (core::NodeId n : {a, b, c}) {
    nodes[n].up = true;
    nodes[n].last_seen = 1000;
  }
  nodes[b].Drain("bad fan", "admin", 5);
  EXPECT_TRUE(nodes.Usable(a));
  EXPECT_FALSE(nodes.Usable(b));
  EXPECT_EQ(nodes.Up(), 3);  // drained is still up
  auto stop = [](core::NodeId n, std::string key, core::Ticks deadline) {
    return UnreadStop{n, std::move(key), nullptr, deadline};
  };
  nodes.AddUnreadStop(stop(c, "w1", 10));
  nodes.AddUnreadStop(stop(c, "w2", 50));
  EXPECT_FALSE(nodes.Usable(c));
  auto past = [](core::Ticks now) {
    return [now](const UnreadStop& u) { return now > u.deadline; };
  };
  EXPECT_EQ(nodes.WithUnreadStops(past(20)), std::vector<core::NodeId>{c});
  EXPECT_TRUE(nodes.EndUnreadStops(c, past(20)));   // w1 went, w2 still holds the node
  EXPECT_FALSE(nodes.EndUnreadStops(c, past(20)));  // nothing more went
  EXPECT_FALSE(nodes.Usable(c));
  EXPECT_FALSE(nodes.EndUnreadStops(a, past(100)));  // another node's stops stay
  EXPECT_TRUE(nodes.EndUnreadStops(c, past(100)));
  EXPECT_TRUE(nodes.Usable(c));
}

TEST(NodeBook, NodesSilentPastTheTimeoutAreTheUpOnesOnlyAndHearingAllGivesThemTime) {
  NodeBook nodes;
  nodes.Reset(3);
  for (uint32_t i = 0; i < 3; ++i) nodes[core::NodeId(i)].last_seen = 500 * i;
  nodes[core::NodeId(0)].up = nodes[core::NodeId(1)].up = true;  // node 2 is down already
  EXPECT_EQ(nodes.Silent(1150, 1000), std::vector<core::NodeId>{core::NodeId(0)});
  nodes.HeardAll(1150);
  EXPECT_TRUE(nodes.Silent(2100, 1000).empty());
  EXPECT_EQ(nodes[core::NodeId(2)].last_seen, 1000);  // a node down is not heard from
  nodes[core::NodeId(1)].last_seen = 5000;            // never moved back
  nodes.HeardAll(1200);
  EXPECT_EQ(nodes[core::NodeId(1)].last_seen, 5000);
}

TEST(NodeWatches, AWatchIsAnsweredWhenItsNodeMovesOnOrItsDeadlinePasses) {
  NodeWatches w;
  w.Reset(2);
  std::vector<std::string> got;
  auto done = [&got](std::string who) { return [&got, who](Reply) { got.push_back(who); }; };
  w.Park(core::NodeId(0), done("n0"), w.version(core::NodeId(0)), /*deadline=*/1000);
  w.Park(core::NodeId(1), done("n1"), w.version(core::NodeId(1)), /*deadline=*/500);
  int answers = 0;
  auto answer = [&answers](core::NodeId) {
    ++answers;
    return Reply{};
  };
  w.AnswerDue(100, answer);
  EXPECT_TRUE(got.empty());
  w.Bump(core::NodeId(0));
  w.AnswerDue(100, answer);
  EXPECT_EQ(got, (std::vector<std::string>{"n0"}));
  w.AnswerDue(500, answer);  // n1's deadline
  EXPECT_EQ(got, (std::vector<std::string>{"n0", "n1"}));
  EXPECT_EQ(answers, 2);
  const std::vector<int64_t> before = w.versions();
  w.Reset(2);
  w.MoveOn(before);  // after a read-back: past every version sent before
  EXPECT_EQ(w.version(core::NodeId(0)), before[0] + 1);
}

TEST(Mailbox, AClosedMailboxRefusesAndLeavesTheItemWithTheCaller) {
  Mailbox<std::string> box(/*open=*/false);
  std::string item = "early";
  EXPECT_FALSE(box.Push(std::move(item)));
  EXPECT_EQ(item, "early");
  box.Open();
  EXPECT_TRUE(box.Push(std::string("a")));
  std::thread pusher([&box] { box.Push(std::string("b")); });
  pusher.join();
  bool closed = true;
  auto taken = box.Take(Mailbox<std::string>::Clock::now(), &closed);
  EXPECT_FALSE(closed);
  EXPECT_EQ(taken.size(), 2U);
  EXPECT_TRUE(box.Close());
  EXPECT_FALSE(box.Close());
  // Closed: Take returns at once, however far its deadline.
  taken = box.Take(Mailbox<std::string>::Clock::now() + std::chrono::hours(1), &closed);
  EXPECT_TRUE(closed && taken.empty());
}

}  // namespace
}  // namespace gantry::server
