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
  // once are serialised; a call from inside a task runs inline.
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn);

  void set_threads(int threads);  // 0 = hardware concurrency
  int threads() const { return threads_; }

  ~ThreadPool();

 private:
  ThreadPool();
  void start(int threads);
  void stop();
  void worker_loop(uint64_t seen);
  void run_tasks();

  int threads_ = 1;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // one parallel_for at a time
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t n_tasks_ = 0;
  std::atomic<int64_t> next_{0};
  int active_ = 0;
  uint64_t generation_ = 0;
  bool quit_ = false;
};

}  // namespace qg::detail::cpu
