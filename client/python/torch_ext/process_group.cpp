/*
 * process_group.cpp - the "ringd" backend of torch.distributed: a
 * c10d::ProcessGroup whose collectives run on the process's ringd connection.
 *
 * torch 1.13 calls its process groups from C++ (DistributedDataParallel's
 * reducer runs in the autograd engine, its parameter checks and broadcasts in
 * C++), and a Python subclass of ProcessGroup does not live safely there: the
 * C++ side may outlive the Python half of the object. So the process group
 * and its Work objects are C++ classes that own references to Python objects,
 * the other way round.
 *
 * What runs a collective is Python: ProcessGroupRingd hands the tensors to a
 * ringd.torch._distributed.Backend (GIL held), which submits them on the
 * process's one ringd.Connection and returns a pending work object with
 * wait(), is_completed(), exception() and add_done_callback(). Keeping every
 * submission on that connection is what makes a process one rank, whoever
 * (DDP, the Horovod-style helpers, NumPy code) submits.
 *
 * RingdWork::getFuture() is what DDP waits on: a c10 Future, completed once
 * the Python work's done callback has run. Not in that callback's thread,
 * though: that thread completes requests for the whole connection (the
 * progress thread, or a thread waiting), and a future's callbacks run where
 * it is marked completed, and may issue collectives and wait on them
 * (PowerSGD's hooks do). The futures are completed by a Completer's
 * threads instead.
 */
#include <torch/csrc/api/include/torch/version.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/utils/pybind.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

/* The holder type torch binds ProcessGroup and its subclasses with
 * (torch/csrc/distributed/c10d/init.cpp, not installed): it drops the last
 * reference without the GIL, since destroying a process group may wait for
 * threads that need it. */
template <typename T>
class IntrusivePtrNoGilDestructor {
    c10::intrusive_ptr<T> impl_;

  public:
    IntrusivePtrNoGilDestructor() = default;
    IntrusivePtrNoGilDestructor(const IntrusivePtrNoGilDestructor &) = default;
    IntrusivePtrNoGilDestructor(IntrusivePtrNoGilDestructor &&) = default;
    IntrusivePtrNoGilDestructor &operator=(const IntrusivePtrNoGilDestructor &) = default;
    IntrusivePtrNoGilDestructor &operator=(IntrusivePtrNoGilDestructor &&) = default;
    /* implicit */ IntrusivePtrNoGilDestructor(c10::intrusive_ptr<T> impl)
        : impl_(std::move(impl)) {}
    /* pybind11 issue 2957: constructing from a raw pointer must steal it. */
    explicit IntrusivePtrNoGilDestructor(T *impl)
        : impl_(c10::intrusive_ptr<T>::unsafe_steal_from_new(impl)) {}
    ~IntrusivePtrNoGilDestructor() {
        if (impl_) {
            if (PyGILState_Check()) {
                py::gil_scoped_release release;
                impl_.reset();
            } else {
                impl_.reset();
            }
        }
    }
    T &operator*() const noexcept { return *impl_; }
    T *operator->() const noexcept { return impl_.get(); }
    T *get() const noexcept { return impl_.get(); }
    void reset() noexcept { impl_.reset(); }
    operator bool() const noexcept { return impl_; }
};

} // namespace

PYBIND11_DECLARE_HOLDER_TYPE(T, IntrusivePtrNoGilDestructor<T>, true);

namespace {

/* Drops a Python reference from C++ code that may not hold the GIL, and may
 * run while the interpreter is finalizing (then the object is leaked). */
void release_py(py::object &obj) {
    if (!obj) return;
    if (!Py_IsInitialized()) {
        obj.release();
        return;
    }
    py::gil_scoped_acquire gil;
    obj = py::object();
}

/* A C++ exception carrying a Python exception's text, for the callers that
 * are C++ (DDP's reducer waiting on a future). */
std::exception_ptr as_cpp_error(const py::handle &err) {
    std::string text = py::str(py::type::handle_of(err).attr("__name__"));
    text += ": ";
    text += py::str(err);
    return std::make_exception_ptr(std::runtime_error(text));
}

/* Runs the completions of c10 futures, and so their callbacks, on threads
 * of its own. A callback may wait for a collective whose own future needs
 * a thread to complete it: whenever more completions are queued than
 * threads are idle, another thread starts, so a waiting callback never
 * holds up the completion it waits for. Threads idle for a while end, one
 * is kept. One per process; a child after fork() starts afresh (the
 * parent's threads are not in it). */
class Completer {
  public:
    static void post(std::function<void()> fn) {
        static std::mutex guard;
        static Completer *one = nullptr;
        static pid_t pid = 0;
        Completer *c;
        {
            std::lock_guard<std::mutex> g(guard);
            if (!one || pid != getpid()) {
                one = new Completer(); /* the parent's, if any, is left: its lock may be held */
                pid = getpid();
            }
            c = one;
        }
        c->enqueue(std::move(fn));
    }

  private:
    static constexpr std::chrono::seconds kIdle{10};

    void enqueue(std::function<void()> fn) {
        std::unique_lock<std::mutex> lock(m_);
        queue_.push_back(std::move(fn));
        if (queue_.size() > idle_) {
            threads_++;
            std::thread([this] { work(); }).detach();
        } else {
            ready_.notify_one();
        }
    }

    void work() {
        std::unique_lock<std::mutex> lock(m_);
        for (;;) {
            while (queue_.empty()) {
                idle_++;
                bool woken = ready_.wait_for(lock, kIdle, [this] { return !queue_.empty(); });
                idle_--;
                if (!woken && threads_ > 1) {
                    threads_--;
                    return;
                }
            }
            std::function<void()> fn = std::move(queue_.front());
            queue_.pop_front();
            lock.unlock();
            fn();
            lock.lock();
        }
    }

    std::mutex m_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> queue_;
    size_t idle_ = 0;
    size_t threads_ = 0;
};

/* The name of a reduction as ringd.torch's Backend takes it. */
const char *op_name(const c10d::ReduceOp &op) {
    switch (op.op_) {
    case c10d::ReduceOp::SUM:
        return "sum";
    case c10d::ReduceOp::AVG:
        return "mean";
    case c10d::ReduceOp::PRODUCT:
        return "prod";
    case c10d::ReduceOp::MIN:
        return "min";
    case c10d::ReduceOp::MAX:
        return "max";
    case c10d::ReduceOp::BAND:
        return "band";
    case c10d::ReduceOp::BOR:
        return "bor";
    case c10d::ReduceOp::BXOR:
        return "bxor";
    case c10d::ReduceOp::PREMUL_SUM:
        return "premul_sum";
    default:
        return "unknown";
    }
}

/* One collective in flight: the Python work object, and the tensors that
 * hold its result (Work::result(), the future's value). */
class RingdWork : public c10d::Work {
  public:
    RingdWork(int rank, c10d::OpType type, py::object pywork, std::vector<at::Tensor> outputs)
        : c10d::Work(rank, type), pywork_(std::move(pywork)), outputs_(std::move(outputs)) {}

    ~RingdWork() override { release_py(pywork_); }

    bool isCompleted() override {
        py::gil_scoped_acquire gil;
        return pywork_.attr("is_completed")().cast<bool>();
    }

    bool isSuccess() const override {
        py::gil_scoped_acquire gil;
        return pywork_.attr("is_completed")().cast<bool>() && pywork_.attr("exception")().is_none();
    }

    std::exception_ptr exception() const override {
        py::gil_scoped_acquire gil;
        py::object err = pywork_.attr("exception")();
        return err.is_none() ? nullptr : as_cpp_error(err);
    }

    /* Raises the Python exception (ringd.RingError) itself: a Python caller
     * of Work.wait() sees it unchanged. */
    bool wait(std::chrono::milliseconds timeout) override {
        py::gil_scoped_acquire gil;
        py::object secs = py::none();
        if (timeout > std::chrono::milliseconds(0)) secs = py::float_(timeout.count() / 1000.0);
        pywork_.attr("wait")(secs);
        return true;
    }

    std::vector<at::Tensor> result() override { return outputs_; }

    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
        py::gil_scoped_acquire gil;
        if (future_) return future_;
        future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
        auto fut = future_;
        auto outputs = outputs_;
        /* Called once, with the GIL and the connection, when the collective
         * has completed: the future completes on a Completer thread. */
        pywork_.attr("add_done_callback")(py::cpp_function([fut, outputs](py::object err) {
            if (err.is_none()) {
                Completer::post([fut, outputs] { fut->markCompleted(c10::IValue(outputs)); });
            } else {
                std::exception_ptr e = as_cpp_error(err);
                Completer::post([fut, e] { fut->setError(e); });
            }
        }));
        return future_;
    }

  private:
    py::object pywork_;
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupRingd : public c10d::ProcessGroup {
  public:
    ProcessGroupRingd(py::object backend, int rank, int size)
        : c10d::ProcessGroup(rank, size), backend_(std::move(backend)) {}

    ~ProcessGroupRingd() override { release_py(backend_); }

    const std::string getBackendName() const override { return "ringd"; }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override {
        return call(c10d::OpType::BROADCAST, tensors, "broadcast", tensors, opts.rootRank,
                    opts.rootTensor);
    }

    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override {
        return call(c10d::OpType::ALLREDUCE, tensors, "allreduce", tensors,
                    op_name(opts.reduceOp));
    }

    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override {
        return call(c10d::OpType::REDUCE, tensors, "reduce", tensors, opts.rootRank,
                    opts.rootTensor, op_name(opts.reduceOp));
    }

    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &) override {
        return call(c10d::OpType::ALLGATHER, flatten(outputs), "allgather", outputs, inputs);
    }

    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &) override {
        return call(c10d::OpType::_ALLGATHER_BASE, {output}, "allgather_base", output, input);
    }

    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override {
        return call(c10d::OpType::REDUCE_SCATTER, outputs, "reduce_scatter", outputs, inputs,
                    op_name(opts.reduceOp));
    }

    c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
        at::Tensor &output, at::Tensor &input, const c10d::ReduceScatterOptions &opts) override {
        return call(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, "reduce_scatter_base", output,
                    input, op_name(opts.reduceOp));
    }

    c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
        std::vector<at::Tensor> &tensors, const c10d::AllreduceCoalescedOptions &opts) override {
        return call(c10d::OpType::ALLREDUCE_COALESCED, tensors, "allreduce_coalesced", tensors,
                    op_name(opts.reduceOp));
    }

    c10::intrusive_ptr<c10d::Work> allgather_coalesced(
        std::vector<std::vector<at::Tensor>> &outputs, std::vector<at::Tensor> &inputs,
        const c10d::AllgatherOptions &) override {
        return call(c10d::OpType::ALLGATHER_COALESCED, flatten(outputs), "allgather_coalesced",
                    outputs, inputs);
    }

    c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>> &outputs,
                                          std::vector<at::Tensor> &inputs,
                                          const c10d::GatherOptions &opts) override {
        return call(c10d::OpType::GATHER, flatten(outputs), "gather", outputs, inputs,
                    opts.rootRank);
    }

    c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor> &outputs,
                                           std::vector<std::vector<at::Tensor>> &inputs,
                                           const c10d::ScatterOptions &opts) override {
        return call(c10d::OpType::SCATTER, outputs, "scatter", outputs, inputs, opts.rootRank);
    }

    c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor &output, at::Tensor &input,
                                                 std::vector<int64_t> &output_splits,
                                                 std::vector<int64_t> &input_splits,
                                                 const c10d::AllToAllOptions &) override {
        return call(c10d::OpType::ALLTOALL_BASE, {output}, "alltoall_base", output, input,
                    output_splits, input_splits);
    }

    c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor> &outputs,
                                            std::vector<at::Tensor> &inputs,
                                            const c10d::AllToAllOptions &) override {
        return call(c10d::OpType::ALLTOALL, outputs, "alltoall", outputs, inputs);
    }

    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &) override {
        return call(c10d::OpType::BARRIER, {}, "barrier");
    }

  private:
    static std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>> &lists) {
        std::vector<at::Tensor> flat;
        for (auto &list : lists)
            flat.insert(flat.end(), list.begin(), list.end());
        return flat;
    }

    /* backend_.method(args...) with the GIL; a Python exception (bad op,
     * RingError at submission) propagates as itself. */
    template <typename... Args>
    c10::intrusive_ptr<c10d::Work> call(c10d::OpType type, std::vector<at::Tensor> outputs,
                                        const char *method, Args &&...args) {
        py::gil_scoped_acquire gil;
        py::object pywork = backend_.attr(method)(std::forward<Args>(args)...);
        return c10::make_intrusive<RingdWork>(getRank(), type, std::move(pywork),
                                              std::move(outputs));
    }

    py::object backend_;
};

} // namespace

PYBIND11_MODULE(_ringd_pg, m) {
    m.doc() = "The C++ half of the torch.distributed backend \"ringd\" (see ringd.torch).";
    m.attr("TORCH_VERSION") = TORCH_VERSION;
    /* ProcessGroup is torch's, registered by torch._C._distributed_c10d,
     * which ringd.torch imports first. */
    py::class_<ProcessGroupRingd, c10d::ProcessGroup, IntrusivePtrNoGilDestructor<ProcessGroupRingd>>(
        m, "ProcessGroupRingd",
        "ProcessGroupRingd(backend, rank, size): a process group whose collectives call "
        "backend.allreduce(tensors, op), .broadcast(tensors, root, root_tensor), ... and "
        "wait on the work objects they return.")
        .def(py::init([](py::object backend, int rank, int size) {
                 return c10::make_intrusive<ProcessGroupRingd>(std::move(backend), rank, size);
             }),
             py::arg("backend"), py::arg("rank"), py::arg("size"));
}
