// SPDX-License-Identifier: MIT
// test_thread_pool.cpp: the CPU backend's thread pool (cpu/thread_pool.h),
// driven directly: every task runs exactly once, small jobs wake no more
// workers than they have tasks for, nested and concurrent calls, and resizes
// (qg::set_cpu_threads) racing with running jobs. Meant to be run under
// ThreadSanitizer too (QG_SANITIZE=thread; see tests/run_all.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cpu/thread_pool.h"
#include "qg/runtime.h"

namespace {

using qg::detail::cpu::ThreadPool;

// Restores the hardware default when a test ends, pass or fail.
struct PoolSizeGuard {
  ~PoolSizeGuard() { qg::set_cpu_threads(0); }
};

// Runs body on a thread and fails (and ends the process: a stuck call holds
// the pool, so later tests could not run) if it does not finish in time.
void run_with_watchdog(const char* what, const std::function<void()>& body, int seconds = 120) {
  std::packaged_task<void()> task(body);
  std::future<void> done = task.get_future();
  std::thread runner(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) == std::future_status::timeout) {
    ADD_FAILURE() << what << " did not finish within " << seconds << " s: the CPU thread pool deadlocked";
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(1);
  }
  runner.join();
  done.get();
}

// One job: each task adds 1 to its own counter; returns how many tasks did
// not run exactly once.
int64_t run_counting_job(ThreadPool& pool, int64_t n_tasks) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n_tasks));
  for (auto& h : hits) h.store(0);
  pool.parallel_for(n_tasks, [&](int64_t t) { hits[static_cast<size_t>(t)].fetch_add(1); });
  int64_t bad = 0;
  for (auto& h : hits) bad += h.load() != 1;
  return bad;
}

TEST(ThreadPool, EveryTaskRunsExactlyOnce) {
  PoolSizeGuard guard;
  ThreadPool& pool = ThreadPool::instance();
  for (int threads : {1, 2, 3, 5}) {
    qg::set_cpu_threads(threads);
    ASSERT_EQ(pool.threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 64, 1000}) {
      EXPECT_EQ(run_counting_job(pool, n), 0) << "threads=" << threads << " n_tasks=" << n;
    }
  }
}

// One task runs on the caller and wakes nobody; n tasks wake at most n - 1
// workers (the caller takes tasks too), however large the pool.
TEST(ThreadPool, SmallJobsWakeNoMoreWorkersThanTasks) {
  PoolSizeGuard guard;
  ThreadPool& pool = ThreadPool::instance();
  qg::set_cpu_threads(6);
  for (int rep = 0; rep < 20; ++rep) {
    int64_t before = pool.workers_joined();
    std::thread::id ran_on;
    pool.parallel_for(1, [&](int64_t) { ran_on = std::this_thread::get_id(); });
    EXPECT_EQ(ran_on, std::this_thread::get_id()) << "a one-task job must run inline";
    EXPECT_EQ(pool.workers_joined() - before, 0) << "a one-task job woke a worker";
    for (int64_t n : {2, 3, 4, 100}) {
      before = pool.workers_joined();
      EXPECT_EQ(run_counting_job(pool, n), 0) << "n_tasks=" << n;
      EXPECT_LE(pool.workers_joined() - before, std::min<int64_t>(n - 1, 5)) << "n_tasks=" << n;
    }
  }
}

// A task that itself calls parallel_for runs the inner job inline instead of
// waiting for the pool it occupies.
TEST(ThreadPool, NestedCallRunsInline) {
  PoolSizeGuard guard;
  ThreadPool& pool = ThreadPool::instance();
  qg::set_cpu_threads(3);
  std::atomic<int64_t> inner{0};
  run_with_watchdog("a nested parallel_for", [&] {
    pool.parallel_for(8, [&](int64_t) {
      pool.parallel_for(5, [&](int64_t) { inner.fetch_add(1); });
    });
  });
  EXPECT_EQ(inner.load(), 40);
}

// Jobs from several threads at once are serialised, each complete.
TEST(ThreadPool, ConcurrentCallersEachGetCompleteJobs) {
  PoolSizeGuard guard;
  ThreadPool& pool = ThreadPool::instance();
  qg::set_cpu_threads(3);
  std::atomic<int64_t> bad{0};
  run_with_watchdog("concurrent parallel_for callers", [&] {
    std::vector<std::thread> callers;
    for (int c = 0; c < 3; ++c) {
      callers.emplace_back([&, c] {
        for (int it = 0; it < 300; ++it) bad.fetch_add(run_counting_job(pool, 2 + (it + c) % 9));
      });
    }
    for (auto& t : callers) t.join();
  });
  EXPECT_EQ(bad.load(), 0);
}

// The data race this guards against: set_cpu_threads rewrote the pool size
// while parallel_for read it unlocked. One thread resizes the pool over and
// over while two others run many small jobs; every job must still run each
// task exactly once, nothing may hang, and TSan must see no race.
TEST(ThreadPool, ResizeWhileJobsRun) {
  PoolSizeGuard guard;
  ThreadPool& pool = ThreadPool::instance();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> bad{0}, jobs{0};
  run_with_watchdog("set_cpu_threads racing parallel_for", [&] {
    std::vector<std::thread> callers;
    for (int c = 0; c < 2; ++c) {
      callers.emplace_back([&, c] {
        for (int64_t it = 0; !stop.load(); ++it) {
          bad.fetch_add(run_counting_job(pool, 1 + (it + c) % 6));
          jobs.fetch_add(1);
        }
      });
    }
    for (int r = 0; r < 400; ++r) {
      qg::set_cpu_threads(1 + r % 4);
      std::this_thread::yield();
    }
    stop.store(true);
    for (auto& t : callers) t.join();
  });
  EXPECT_EQ(bad.load(), 0) << "tasks that ran zero or several times, over " << jobs.load() << " jobs";
  EXPECT_GT(jobs.load(), 0);
  EXPECT_EQ(qg::cpu_threads(), 4);  // the last resize (1 + 399 % 4) took effect
}

}  // namespace
