// SPDX-License-Identifier: MIT
// thread_pool.cpp: see thread_pool.h.
//
// A job is posted under mutex_ with a number of seats (at most n_tasks - 1,
// the caller being the other worker). A sleeping worker joins when the
// generation is new and a seat is free; the caller takes tasks too, and when
// it runs out it closes the seats and waits only for the workers that joined.
// So the caller never waits for a worker that was not woken, and a job never
// wakes more workers than it has tasks for.
//
// Spins: a worker that finishes a job watches for the next one for about
// kWorkerSpin before it sleeps, and a caller that runs out of tasks watches
// its joined workers finish for up to kCallerSpin before it sleeps. Calls in
// a loop (decode: one GEMM after another) then hand work over without a
// futex wake-up, which costs tens of microseconds on a VM. The condition
// variables stay the authority: a spin that sees nothing falls through to
// the same wait as before.
#include "cpu/thread_pool.h"

#include <chrono>

#include <algorithm>
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

void run_inline(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  for (int64_t t = 0; t < n_tasks; ++t) fn(t);
}

constexpr std::chrono::microseconds kWorkerSpin{200};
constexpr std::chrono::microseconds kCallerSpin{2000};

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until done() or `limit` has passed; true if done().
template <class Done>
bool spin_until(const Done& done, std::chrono::microseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > end) return false;
    cpu_relax();
  }
}
}  // namespace

ThreadPool& ThreadPool::instance() {
  static ThreadPool pool;
  return pool;
}

ThreadPool::ThreadPool() { start(default_threads()); }
ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::start(int threads) {
  const int n = threads < 1 ? 1 : threads;
  threads_.store(n, std::memory_order_relaxed);
  quit_ = false;
  // A new worker starts from the current generation, so it cannot mistake the
  // last finished job for a new one (no job runs while the pool resizes, and
  // that job's seats are closed anyway).
  for (int i = 1; i < n; ++i) workers_.emplace_back([this, g = generation_] { worker_loop(g); });
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
  // call_mutex_ is held by a pooled job for its whole duration: the resize
  // waits for it, and the next job waits for the resize.
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
    spin_until([&] { return posted_.load(std::memory_order_acquire) != seen; }, kWorkerSpin);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return quit_ || (generation_ != seen && seats_ > 0); });
      if (quit_) return;
      seen = generation_;
      --seats_;
      ++active_;
      running_.fetch_add(1, std::memory_order_relaxed);
      joined_.fetch_add(1, std::memory_order_relaxed);
    }
    run_tasks();
    running_.fetch_sub(1, std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  if (n_tasks <= 0) return;
  // No lock taken and no worker woken: a nested call (the pool is busy with
  // its caller's job), one task, or a one-thread pool. A stale size read here
  // is harmless: the inline path touches no pool state.
  if (n_tasks == 1 || t_inside_task || threads() == 1) {
    run_inline(n_tasks, fn);
  } else {
    run_on_pool(n_tasks, fn);
  }
}

void ThreadPool::run_on_pool(int64_t n_tasks, const std::function<void(int64_t)>& fn) {
  std::lock_guard<std::mutex> call(call_mutex_);
  // The pool may have been resized between the caller's check and the lock.
  const int seats = static_cast<int>(std::min<int64_t>(static_cast<int64_t>(workers_.size()), n_tasks - 1));
  if (seats == 0) {
    run_inline(n_tasks, fn);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &fn;
    n_tasks_ = n_tasks;
    next_.store(0);
    seats_ = seats;
    active_ = 0;
    ++generation_;
    posted_.store(generation_, std::memory_order_release);
  }
  // Waking only as many workers as there are seats; a wake-up that reaches a
  // worker which then finds no seat costs a little time, never correctness.
  if (seats == static_cast<int>(workers_.size())) {
    wake_.notify_all();
  } else {
    for (int i = 0; i < seats; ++i) wake_.notify_one();
  }
  run_tasks();
  spin_until([&] { return running_.load(std::memory_order_acquire) == 0; }, kCallerSpin);
  std::unique_lock<std::mutex> lock(mutex_);
  seats_ = 0;  // every task is taken: a worker waking now would find nothing to do
  done_.wait(lock, [&] { return active_ == 0; });
  job_ = nullptr;
}

}  // namespace qg::detail::cpu
