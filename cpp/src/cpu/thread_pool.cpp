// SPDX-License-Identifier: MIT
// thread_pool.cpp: see thread_pool.h.
#include "cpu/thread_pool.h"

#include <cstdlib>

namespace qg::detail::cpu {

namespace {
thread_local bool t_inside_task = false;

int default_threads() {
  if (const char* env = std::getenv("QG_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}
}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() { start(default_threads()); }
ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::start(int threads) {
  threads_ = threads < 1 ? 1 : threads;
  quit_ = false;
  // A new worker must not mistake the last finished job for a new one: it
  // starts from the current generation (no job runs while the pool resizes).
  for (int i = 1; i < threads_; ++i) workers_.emplace_back([this, g = generation_] { worker_loop(g); });
}

void ThreadPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void ThreadPool::set_threads(int threads) {
  std::lock_guard<std::mutex> call(call_mutex_);
  stop();
  start(threads > 0 ? threads : default_threads());
}

void ThreadPool::run_tasks() {
  t_inside_task = true;
  for (int64_t t; (t = next_.fetch_add(1)) < n_tasks_;) (*job_)(t);
  t_inside_task = false;
}

void ThreadPool::worker_loop(uint64_t seen) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
    }
    run_tasks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  if (n_tasks == 1 || threads_ == 1 || t_inside_task) {
    for (int64_t t = 0; t < n_tasks; ++t) fn(t);
    return;
  }
  std::lock_guard<std::mutex> call(call_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_.store(0);
    active_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  run_tasks();
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
}

}  // namespace qg::detail::cpu
