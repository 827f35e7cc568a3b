// SPDX-License-Identifier: MIT
// thread_pool.h: a persistent pool for the CPU backend. Workers sleep between
// jobs, so a small GEMM pays a wake-up, not a thread creation per call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace qg::detail::cpu {

class ThreadPool {
 public:
  static ThreadPool& instance();

  // Runs fn(task) for task in [0, n_tasks), spread over the workers and the
  // calling thread; returns when all are done. Calls from several threads at
  // once are serialised; a call from inside a task, a call with one task and
  // a call on a one-thread pool run inline and wake no worker. At most
  // n_tasks - 1 workers join a job: a small job wakes no more threads than it
  // can use.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn);

  // 0 = QG_NUM_THREADS or the hardware concurrency. Waits for the running
  // job, if any: a job never sees the pool resized under it. Must not be
  // called from inside a task (it would wait for its own job).
  void set_threads(int threads);
  // The current size. Atomic: read without a lock by callers on any thread.
  int threads() const { return threads_.load(std::memory_order_relaxed); }
  // How many times a worker has joined a job since the pool was created: what
  // a job costs in wake-ups (for tests and diagnostics).
  int64_t workers_joined() const { return joined_.load(std::memory_order_relaxed); }

  ~ThreadPool();

 private:
  ThreadPool();
  void start(int threads);  // call_mutex_ held (or in the constructor)
  void stop();              // call_mutex_ held (or in the destructor)
  void worker_loop(uint64_t seen);
  void run_tasks();
  void run_on_pool(int64_t n_tasks, const std::function<void(int64_t)>& fn);

  // Written only with call_mutex_ held; atomic because parallel_for's inline
  // check and threads() read it without that lock.
  std::atomic<int> threads_{1};
  std::vector<std::thread> workers_;   // guarded by call_mutex_
  std::mutex call_mutex_;              // one pooled job or resize at a time
  // Job state, guarded by mutex_ (job_ and n_tasks_ are read without it by the
  // workers that joined the job: they cannot change until those have left).
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  int seats_ = 0;    // workers that may still join the current job
  int active_ = 0;   // workers that joined it and have not finished
  std::atomic<int64_t> joined_{0};
  uint64_t generation_ = 0;
  bool quit_ = false;
  // Read without mutex_ by the short spins that spare a wake-up (see
  // thread_pool.cpp): the last posted generation, and the joined workers
  // still running tasks.
  std::atomic<uint64_t> posted_{0};
  std::atomic<int> running_{0};
};

}  // namespace qg::detail::cpu
