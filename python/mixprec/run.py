"""mixprec.run: one training run (the library's mxp_run) from Python.

    run = mixprec.Run(cfg, data={"x": x, "y": y}, model=["linear:64", "gelu", "linear"])
    run.train(num_epochs=2, batch_size=32)
    run.stats["overflow_rate"]; run.predict(x); run.evaluate(); run.save("m.safetensors")
    run = mixprec.Run.resume("runs/latest")

Everything numerical happens in the library: the workload (model.workload),
loss scaling, guards, fallback, rollback and checkpoints are the CLI's. The
binding adds: NumPy arrays in (data, init) and out (predict, state_dict),
the statistics under the seeds' names, guard events as dicts, a progress
callback, and Ctrl-C handling: training runs on a helper thread with the
GIL released (ctypes drops it for the call); a KeyboardInterrupt asks the
run to stop at the next step boundary (a checkpoint is written when
checkpoints are on), waits for it, then re-raises.

Threads (docs/python.md, "Threads"): one train() at a time per Run; from
another thread, the methods that use the model wait for train() to return,
close() asks it to stop at the next step boundary and frees the run after
it returned, and interpreter exit does the same for a train() left running
in a daemon thread. Inside a progress callback the training loop is paused
at a step boundary on the callback's thread: stats, stop(), request_fp32(),
evaluate(), summary(), predict(), state_dict() and save() work there; train()
and close() raise Error at once (they would nest or free the loop).
"""
import contextlib
import ctypes
import json
import math
import os
import signal
import sys
import tempfile
import threading

import numpy as np

from . import _capi, _ckpt, _data, _lib, _obs
from .config import Config
from .errors import Error, GuardStop

_EVENTS_KEPT = 64


def _nan_to_none(v):
    return None if isinstance(v, float) and not math.isfinite(v) else v


class Run(_lib.Handle):
    """A training run. See the module docstring and docs/python.md.

    config: a Config (or a dict of sections for Config(**dict); None: the
    defaults + environment). data: a dict of NumPy arrays named as the data
    files (obs/actions/rewards[/lengths] for the world model; x/y[/x_val/
    y_val] for classifier and regressor), or the path of a safetensors/.npz
    file; None: the workload's built-in data. model: the layer list of the
    `model.layers` key (["linear:64", "gelu", "linear"]). init: a state_dict
    (names as state_dict() returns them) or a safetensors file to start
    from. progress: a function called every `progress_every` steps with a
    dict (step, total_steps, epoch, loss, scale, precision, skipped), or
    True for a tqdm bar when tqdm imports, else plain lines on stderr.
    checkpoints: write checkpoints under the config's checkpoint.* policy
    (the CLI's default). store: feed the library's observability (obs.*:
    metrics.db and events.jsonl in output.dir when obs.store.enabled, the
    HTTP API when obs.http.enabled), as the CLI does.
    """

    def __init__(self, config=None, data=None, model=None, init=None, *, progress=None,
                 progress_every=100, checkpoints=True, store=True, _resume=None):
        self._ptr = ctypes.c_void_p()
        self._lock = threading.RLock()  # held by train() for the whole call
        # held around the library calls that read the run from any thread
        # (stats) and around its destruction, so that close() on one thread
        # never frees the run under such a call on another (ctypes releases
        # the GIL during a call)
        self._handle_lock = threading.RLock()
        self._train_owner = None  # ident of the thread inside train()
        self._cb_thread = None  # ident of the thread running this run's progress callback
        self._closing = False  # close() waits for train() in another thread
        self._events = []
        self._switches = []
        self._n_fallbacks = self._n_rollbacks = 0
        self._tmpdir = None
        self._dataset = None
        L = _capi.declare()
        if config is None:
            config = Config()
        elif isinstance(config, dict):
            config = Config(**config)
        extra = {}
        if model is not None:
            extra["model.layers"] = _data.layers_text(model)
        if init is not None:
            extra["model.init_from"] = self._init_path(init)
        if data is not None and not isinstance(data, dict):
            extra["data.path"] = os.fspath(data)
        latest = None
        if _resume is None and config.source("output.dir") == "default":
            # a new run with the default output.dir: runs/version_<N> of its
            # own, and runs/latest links to it once the run exists
            latest = config["output.dir"]
            buf = ctypes.create_string_buffer(4096)
            err = _lib.CError()
            _lib.check(L.mxp_run_dir_reserve(os.fsencode(latest), buf, len(buf),
                                             ctypes.byref(err)), err)
            extra["output.dir"] = os.fsdecode(buf.value)
        self.config = config.with_overrides(**extra) if extra else config
        if isinstance(data, dict):
            self._dataset = _data.Dataset(data)
        # trains on user data (arrays or data.path), not a built-in workload
        self._user_data = self._dataset is not None or self.config["data.path"] != "none"
        self._progress_user = progress
        self._progress_every = max(1, int(progress_every))
        self._bar = None
        opt = L.mxp_run_options_default()
        self._obs = _obs.Obs(self.config) if store else None
        self._cb = self._make_callbacks(self._obs.observer if self._obs else None)
        opt.observer = ctypes.pointer(self._cb["observer"])
        opt.checkpoints = bool(checkpoints)
        if progress is not None:
            opt.progress = self._cb["progress"]
        if self._dataset is not None:
            opt.data = self._dataset.ptr
        if _resume is not None:
            opt.resume = os.fsencode(_resume)
        self._opt = opt
        _lib.track(self)
        err = _lib.CError()
        try:
            try:
                _lib.check(L.mxp_run_create(self.config._b.resolved, ctypes.byref(opt),
                                            ctypes.byref(self._ptr), ctypes.byref(err)), err)
            except Error as e:
                raise _python_names(e) from None
            if latest is not None:
                _lib.check(L.mxp_run_dir_publish(os.fsencode(latest),
                                                 os.fsencode(self.config["output.dir"]),
                                                 ctypes.byref(err)), err)
        except BaseException:
            self.close()
            if latest is not None:  # the directory reserved above, this run's alone
                import shutil
                shutil.rmtree(self.config["output.dir"], ignore_errors=True)
            raise
        finally:
            if self._dataset is not None:  # borrowed for the create call only
                self._dataset.close()
                self._dataset = None

    # ---- construction helpers -------------------------------------------

    def _init_path(self, init):
        if isinstance(init, dict):
            self._tmpdir = tempfile.mkdtemp(prefix="mixprec-init-")
            p = os.path.join(self._tmpdir, "init.safetensors")
            _ckpt.write_safetensors(p, _data.library_names(init))
            return p
        return os.fspath(init)

    @classmethod
    def resume(cls, path, config=None, data=None, **kw):
        """Continue a run from its newest verified checkpoint (path: run
        directory, checkpoints directory or checkpoint file) with the config
        it was written with; `config` (a dict of sections) overrides keys
        on top, as `mixprec train --resume PATH key=value` does. Resumed
        training gives bit-identical losses and weights to a run that was
        never interrupted. Pass `data` again when the run trained on
        arrays."""
        cfg = Config.from_checkpoint(path, **(config or {}))
        return cls(cfg, data=data, _resume=cfg.checkpoint, **kw)

    def close(self, _timeout=None):
        """Free the run (also done when it is garbage collected and at
        interpreter exit). While train() runs in another thread, close()
        asks it to stop at the next step boundary, waits for it to return
        (a checkpoint is written when checkpoints are on), then frees the
        run. Inside this run's own progress callback it raises Error
        (stop() is what ends training from there)."""
        self._refuse_inside_train("close")
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before any library object existed
            return
        if self._train_owner is not None:
            self._closing = True
            self.stop()
        if not lock.acquire(timeout=-1 if _timeout is None else _timeout):
            _lib.logger.warning("a mixprec.Run was still in train() %.0f s after it was asked "
                                "to stop at interpreter exit; it is left to the process's end",
                                _timeout)
            return
        try:
            self._free()
        finally:
            self._closing = False
            lock.release()

    def _free(self):
        if getattr(self, "_ptr", None):
            with self._handle_lock:
                ptr, self._ptr = self._ptr, ctypes.c_void_p()
                _lib.lib().mxp_run_destroy(ptr)  # ends the run in the store
        if getattr(self, "_obs", None) is not None:
            self._obs.close()
            self._obs = None
        if getattr(self, "_dataset", None) is not None:
            self._dataset.close()
            self._dataset = None
        if getattr(self, "_tmpdir", None):
            import shutil
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def _close_at_exit(self):
        """interpreter exit (_lib._shutdown): as close(), but a train() that
        does not reach a step boundary within 60 s is left running."""
        self.close(_timeout=60.0)

    def _refuse_inside_train(self, what):
        me = threading.get_ident()
        if getattr(self, "_cb_thread", None) == me:
            raise Error("Run.%s() was called inside this Run's progress callback: the callback "
                        "runs in the middle of train(), and %s there would %s; accepted there: "
                        "stats, stop(), request_fp32(), evaluate(), summary(), predict(), "
                        "state_dict(), save(); call %s() after train() returns (stop() ends it)"
                        % (what, what, "free the run under the training loop" if what == "close"
                           else "nest one training loop in another", what), "bad_state")
        if getattr(self, "_train_owner", None) == me:
            raise Error("Run.%s() was called on the thread that is inside this Run's train() "
                        "(from a signal handler?) while training runs on its helper thread; "
                        "accepted there: stats, stop(), request_fp32(); call %s() after "
                        "train() returns" % (what, what), "bad_state")

    @contextlib.contextmanager
    def _using(self, what):
        """The model is used by `what`: inside this run's progress callback
        the loop is paused at a step boundary on this thread, so it goes
        ahead; elsewhere it waits for a train() in another thread to end."""
        if self._cb_thread == threading.get_ident() and what != "train":
            yield
            return
        self._refuse_inside_train(what)
        with self._lock:
            yield

    @property
    def output_dir(self):
        """The run's directory (output.dir): without output.dir in the config,
        runs/version_<N>, made for this run (runs/latest links to it)."""
        return self.config["output.dir"]

    def _live(self):
        if not self._ptr:
            raise Error("the run is closed", "bad_state")
        return self._ptr

    # ---- callbacks ------------------------------------------------------

    def _make_callbacks(self, base):
        """The run's observer: `base` (the store's, C functions) with the
        precision and guard-event hooks wrapped to record them here too."""
        me = self

        def on_precision(_s, _run, frm, to, reason):
            if base is not None and base.precision_changed:
                base.precision_changed(_s, _run, frm, to, reason)
            me._switches.append({"from": _capi.PRECISIONS[frm], "to": _capi.PRECISIONS[to],
                                 "reason": _capi.cstr(reason)})

        def on_guard(_s, _run, evp):
            if base is not None and base.guard_event:
                base.guard_event(_s, _run, evp)
            ev = _event_dict(evp.contents)
            if "rollback" in ev["taken"]:
                me._n_rollbacks += 1
            if "stop" in ev["taken"].split("+"):
                me._guard_stop = ev
            if ev["from"] != ev["to"] and ("fallback" in ev["taken"] or ev["kind"] == "scaler"):
                me._n_fallbacks += 1
            me._events.append(ev)
            del me._events[:-_EVENTS_KEPT]

        def on_progress(_u, pp):
            p = pp.contents
            if p.step % me._progress_every and p.step != p.total_steps:
                return
            r = p.result.contents if p.result else None
            info = {"step": p.step, "total_steps": p.total_steps, "epoch": p.epoch,
                    "total_epochs": p.total_epochs,
                    "loss": r.loss if r else float("nan"),
                    "scale": r.scale if r else float("nan"),
                    "skipped": bool(r.skipped) if r else False,
                    "precision": me._precision_name()}
            me._cb_thread = threading.get_ident()
            try:
                me._report(info)
            except BaseException as e:  # never unwind into C: stop and re-raise later
                me._cb_error = e
                me.stop()
            finally:
                me._cb_thread = None

        obs = _capi.RunObserver()
        if base is not None:
            # self, begin, step, end, destroy: the store's C functions
            ctypes.memmove(ctypes.byref(obs), ctypes.byref(base), ctypes.sizeof(obs))
        obs.precision_changed = _capi.OBS_PRECISION_FN(on_precision)
        obs.guard_event = _capi.OBS_GUARD_FN(on_guard)
        return {"observer": obs, "progress": _capi.PROGRESS_FN(on_progress),
                # keep the function objects alive as long as the run
                "refs": (obs.precision_changed, obs.guard_event)}

    def _report(self, info):
        pr = self._progress_user
        if pr is True:
            if self._bar is None:
                try:
                    from tqdm import tqdm
                except ImportError:
                    self._progress_user = pr = _log_progress
                else:
                    self._bar = tqdm(total=info["total_steps"], unit="step")
            if self._bar is not None:
                self._bar.n = info["step"]
                self._bar.set_postfix(loss="%.4g" % info["loss"], scale="%g" % info["scale"],
                                      precision=info["precision"], refresh=False)
                self._bar.refresh()
                return
        pr(info)

    def _precision_name(self):
        info = _capi.RunInfo()
        _lib.lib().mxp_run_stats(self._ptr, ctypes.byref(info))
        return _capi.PRECISIONS[info.precision]

    # ---- training -------------------------------------------------------

    def train(self, num_epochs=None, batch_size=None):
        """Train num_epochs epochs at batch_size (None: the config's
        training.epochs / training.batch_size). After a resume it first
        finishes the interrupted call. Returns self.stats. Raises GuardStop
        when a guard rule with action `stop` ended the run, and
        KeyboardInterrupt after Ctrl-C (the run stopped at a step boundary
        and wrote a checkpoint when checkpoints are on)."""
        L = _lib.lib()
        ep = int(num_epochs or 0)
        bs = int(batch_size or 0)
        if ep < 0 or bs < 0:
            raise Error("num_epochs=%r batch_size=%r: accepted: positive integers or None"
                        % (num_epochs, batch_size), "invalid_arg")
        err = _lib.CError()
        box = {}
        done = threading.Event()

        def work(ptr):
            try:
                if threading.current_thread() is not threading.main_thread():
                    # SIGINT goes to the main thread, which waits below
                    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
                box["s"] = L.mxp_run_train(ptr, ep, bs, ctypes.byref(err))
            finally:
                done.set()

        interrupted = False
        with self._using("train"):  # one train() at a time; refused inside its callback
            ptr = self._live()
            if self._closing:
                raise Error("the run is being closed by another thread", "bad_state")
            self._cb_error = None
            self._guard_stop = None
            self._train_owner = threading.get_ident()
            try:
                if threading.current_thread() is threading.main_thread():
                    t = threading.Thread(target=work, args=(ptr,), name="mixprec-train",
                                         daemon=True)
                    try:
                        t.start()  # a SIGINT may land while it waits for the thread
                    except KeyboardInterrupt:
                        interrupted = True
                    # An Event, not Thread.join: an interrupted join marks a
                    # live thread stopped on Python 3.11 (its bpo-45274
                    # handling). The timeout lets a SIGINT that a library
                    # thread took be seen here within 0.2 s. The stop is
                    # asked once: one asked before the call began stops it
                    # at its first step, and asking again after the call
                    # honoured it would stop the next train().
                    asked = False
                    while not done.is_set():
                        try:
                            if interrupted and not asked:
                                asked = True
                                self.stop()
                            done.wait(0.2)
                        except KeyboardInterrupt:
                            interrupted = True
                    t.join()
                else:
                    work(ptr)
            finally:
                self._train_owner = None
                if self._bar is not None:
                    self._bar.close()
                    self._bar = None
            _lib.check(box["s"], err)
            self._write_summary()
            # read while this call still holds the run: once the lock is
            # released, close() on another thread (or at interpreter exit)
            # may free it
            st = self.stats
        if interrupted:
            raise KeyboardInterrupt
        if self._cb_error is not None:
            raise self._cb_error
        if st["stopped"] and self._guard_stop is not None:
            raise GuardStop("a guard rule with action stop ended the run: " +
                            self._guard_stop["detail"], "guard_stop")
        return st

    def stop(self):
        """Ask the run to stop after the step in progress (safe from any
        thread and from a progress callback); train() then returns, and a
        later train() on this Run continues where it stopped (as
        Run.resume(output dir) would). Asked while no train() runs, it
        stops the next train() after its first step."""
        with self._handle_lock:
            if self._ptr:
                _lib.lib().mxp_run_request_stop(self._ptr)

    def request_fp32(self, reason="python"):
        """Switch to FP32 at the next step boundary (the operator switch)."""
        with self._handle_lock:
            _lib.lib().mxp_run_request_precision(self._live(), 0, reason.encode())

    def evaluate(self):
        """Held-out evaluation: {"split", "loss", "accuracy", "bits_per_char",
        "mse", "open_loop"} (None where the workload has no such number;
        "mse": the MSE of a regression model's mean, beside a Gaussian head's
        NLL "loss"; "open_loop", world models: {1: e1, 5: e5, 10: e10}, the
        open-loop state error after k steps, docs/run.md "Open-loop error";
        "bce", a world model with model.termination: the flag's BCE, and
        "accuracy" then its termination accuracy). An ensemble adds
        "member_loss" (each member's loss) and "elites" (the members whose
        mean the figures use; docs/world_models.md "Elites")."""
        ev = _capi.RunEval()
        err = _lib.CError()
        with self._using("evaluate"):
            _lib.check(_lib.lib().mxp_run_evaluate(self._live(), ctypes.byref(ev),
                                                   ctypes.byref(err)), err)
        return {"split": _capi.cstr(ev.name), "loss": _nan_to_none(ev.loss),
                "accuracy": _nan_to_none(ev.accuracy),
                "bits_per_char": _nan_to_none(ev.bits_per_char),
                "mse": _nan_to_none(ev.mse), "bce": _nan_to_none(ev.bce),
                "open_loop": ev.open_loop_dict(),
                **ev.member_fields()}

    @property
    def elites(self):
        """An ensemble's elites: the member indices named by the last
        validation (model.elites; all members before the first), [0] for
        one model."""
        with self._handle_lock:
            mask = _lib.lib().mxp_run_elites(self._live())
        return [e for e in range(64) if mask >> e & 1]

    def summary(self):
        """The run's summary, the object of the CLI's summary.json (schema
        "mixprec.summary/1", docs/json.md; the library's
        mxp_run_summary_json), with a fresh held-out evaluation. train()
        writes it to output.dir/summary.json after every call."""
        ev = _capi.RunEval()
        err = _lib.CError()
        L = _lib.lib()
        with self._using("summary"):
            ptr = self._live()
            _lib.check(L.mxp_run_evaluate(ptr, ctypes.byref(ev), ctypes.byref(err)), err)
            cap = 1 << 16
            while True:
                buf = ctypes.create_string_buffer(cap)
                n = L.mxp_run_summary_json(ptr, ctypes.byref(ev), float("nan"), buf, cap)
                if n >= 0 or cap >= 1 << 24:
                    break
                cap *= 4
        if n < 0:
            raise Error("the run's summary does not fit in %d bytes" % cap, "internal")
        return json.loads(buf.value.decode())

    def _write_summary(self):
        out = self.config["output.dir"]
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "summary.json"), "w") as f:
            f.write(json.dumps(self.summary(), separators=(",", ":")) + "\n")

    def save(self, path):
        """Write a checkpoint of the current state to path (atomically)."""
        err = _lib.CError()
        with self._using("save"):
            _lib.check(_lib.lib().mxp_run_save(self._live(), os.fsencode(path),
                                               ctypes.byref(err)), err)
        return os.fspath(path)

    # ---- state ----------------------------------------------------------

    @property
    def stats(self):
        """The run's statistics under the seeds' names: fp16_enabled_runtime,
        overflow_rate, current_scale, skipped_steps, total_steps, precision,
        fallbacks, rollbacks, guard_events (the last 64, oldest first), and
        the rest of the library's mxp_run_stats_json."""
        L = _lib.lib()
        info = _capi.RunInfo()
        buf = ctypes.create_string_buffer(1 << 16)
        with self._handle_lock:  # close() on another thread waits for these calls
            ptr = self._live()
            L.mxp_run_stats(ptr, ctypes.byref(info))
            n = L.mxp_run_stats_json(ptr, buf, len(buf))
        d = {}
        if n > 0:
            try:
                d = json.loads(buf.value.decode("utf-8", "replace"))
            except ValueError:
                d = {}
        prec = _capi.PRECISIONS[info.precision]
        d.update({
            "fp16_enabled_runtime": d.get("fp16_enabled_runtime",
                                          prec in ("fp16", "mixed_fp16")),
            "overflow_rate": info.overflow_rate,
            "current_scale": float(info.loss_scale),
            "skipped_steps": info.skipped_steps,
            "total_steps": info.training_steps,
            "optimizer_steps": info.optimizer_steps,
            "precision": prec,
            "emulated": bool(info.emulated),
            "fallbacks": self._n_fallbacks,
            "rollbacks": self._n_rollbacks,
            "guard_events": list(self._events),
            "precision_switches": list(self._switches),
            "epoch": info.epoch,
            "last_loss": _nan_to_none(info.last_loss),
            "epoch_mean_loss": _nan_to_none(info.epoch_mean_loss),
            "wall_s": info.wall_s,
            "stopped": bool(info.stopped),
            "finished": bool(info.finished),
            "resumed": bool(info.resumed),
            "checkpoints_written": info.checkpoints_written,
            "last_checkpoint": _capi.cstr(info.last_checkpoint) or None,
            "run_id": _capi.cstr(info.run_id),
            "workload": _capi.cstr(info.workload),
            # validation during training (training.eval_every; docs/run.md)
            "val_loss": _nan_to_none(info.val_loss),
            "best_val_loss": _nan_to_none(info.best_val_loss),
            "best_epoch": info.best_epoch or None,
            "best_step": info.best_step or None,
            "evaluations": info.evaluations,
            "early_stopped": bool(info.early_stopped),
            "best_checkpoint": _capi.cstr(info.best_checkpoint) or None,
        })
        return d

    def _model(self):
        m = _lib.lib().mxp_run_model(self._live())
        if not m:
            raise Error("the run has no model", "bad_state")
        return m

    def predict(self, x=None, **arrays):
        """The current model's outputs, as `mixprec predict` computes them
        on a checkpoint of this state. x [B, D] (or one row [D]) -> FP32
        [B, K] (logits for a classifier; an ensemble, model.ensemble = E > 1:
        [E, B, K], or [E, K] for one row) straight through the model, in the
        run's current precision; the model's input units (the user-data
        world model trains standardised: pass obs=, actions= instead, to get
        {"next_obs", "reward"} in the data's units through a checkpoint of
        this state and mixprec.Predictor)."""
        if arrays:
            if x is not None:
                arrays["x"] = x
            from .predict import Predictor
            d = tempfile.mkdtemp(prefix="mixprec-predict-")
            try:
                p = self.save(os.path.join(d, "now.safetensors"))
                with Predictor(p) as pr:
                    return pr.predict(**arrays)
            finally:
                import shutil
                shutil.rmtree(d, ignore_errors=True)
        L = _lib.lib()
        with self._using("predict"):
            m = self._model()
            spec = L.mxp_model_get_spec(m).contents
            a = np.asarray(x, dtype=np.float32)
            one = a.ndim == 1
            if one:
                a = a[None, :]
            if a.ndim != 2 or a.shape[1] != spec.in_dim:
                raise Error("predict: x has shape %s; accepted: [B, %d] or [%d]" %
                            (tuple(np.shape(x)), spec.in_dim, spec.in_dim), "invalid_arg")
            if not np.all(np.isfinite(a)):
                raise Error("predict: x holds NaN or Inf; accepted: finite values",
                            "nonfinite")
            a = np.ascontiguousarray(a)
            E = max(1, int(spec.ensemble))  # an ensemble writes [E, B, K], member-major
            out = np.empty((E, a.shape[0], L.mxp_model_out_dim(m)), np.float32)
            step = max(1, int(spec.max_batch))
            err = _lib.CError()
            for i in range(0, a.shape[0], step):
                xa = a[i:i + step]
                oa = np.empty((E, xa.shape[0], out.shape[2]), np.float32)
                _lib.check(L.mxp_model_predict(m, xa.ctypes.data, xa.shape[0], oa.ctypes.data,
                                               ctypes.byref(err)), err)
                out[:, i:i + step] = oa
        out = out[:, 0] if one else out
        return out if E > 1 else out[0]

    def state_dict(self, library_names=False):
        """The parameters as NumPy float32 arrays under PyTorch names:
        an MLP's "0.weight" [out, in], "0.bias" [out], "2.weight", ... load
        into the matching torch.nn.Sequential (layer indices count the
        activations, as nn.Sequential does). The FP32 master weights when
        the mode keeps them, else the working weights widened to FP32.
        library_names=True keeps the checkpoint's names ("layers.0.weight")."""
        L = _lib.lib()
        with self._using("state_dict"):
            m = self._model()
            # one get of the parameter slab, widened to FP32 by the library
            # (the backend owns the memory: docs/design.md "Who owns memory")
            total = L.mxp_model_num_params(m)
            flat = np.empty(total, np.float32)
            err = _lib.CError()
            _lib.check(L.mxp_model_tensor_get(m, _capi.TENSOR_PARAM, None, _capi.DTYPE_F32,
                                              flat.ctypes.data, flat.nbytes, ctypes.byref(err)),
                       err)
            out = {}
            for i in range(L.mxp_model_num_tensors(m)):
                t = L.mxp_model_tensor(m, i).contents
                name = t.name.decode()
                shape = tuple(t.shape[d] for d in range(t.ndim))
                arr = flat[t.offset:t.offset + t.count].reshape(shape).copy()
                out[name if library_names else _data.torch_name(name)] = arr
        return out

    def to_torch(self):
        """The model as a torch.nn.Module. A run on user data (data= arrays
        or data.path): the module mixprec.load_torch returns for a checkpoint
        of the current state (after train() with checkpoints on, the run's
        latest checkpoint): one model or an ensemble, deterministic or
        Gaussian head, termination flag, standardisation inside; its forward
        gives what predict(obs=, actions=) / predict(x) give (FP32). A run on
        a built-in workload (no user data): the torch.nn.Sequential of its
        one MLP with these weights (state_dict() names), or with
        model.ensemble = E > 1 a module whose members[e].layers are the
        members' MLPs and whose forward(x) stacks their outputs [E, B, out]
        (as the run's predict). Needs torch
        (ImportError else)."""
        import torch  # noqa: F401  (ImportError tells the user torch is missing)
        if not self._user_data:
            # a built-in workload: its MLP (or ensemble of MLPs) as it is
            from ._torch import to_sequential
            L = _lib.lib()
            with self._using("to_torch"):
                spec = L.mxp_model_get_spec(self._model()).contents
            return to_sequential(spec, self.state_dict())
        from .predict import Predictor
        from .torch_load import export_to_torch
        d = tempfile.mkdtemp(prefix="mixprec-torch-")
        try:
            path = self.save(os.path.join(d, "now.safetensors"))
            with Predictor(path) as pred:
                return export_to_torch(pred)
        finally:
            import shutil
            shutil.rmtree(d, ignore_errors=True)


def _python_names(e):
    """The library's error for a run directory holding another run names the
    CLI's and C's ways out (--resume DIR, mxp_run_options.resume): give the
    Python ones."""
    msg = str(e)
    i = msg.find("continue that run with --resume ")
    if i < 0:
        return e
    j = msg.find(" (mxp_run_options.resume)", i)
    if j < 0:
        return e
    d = msg[i + len("continue that run with --resume "):j]
    msg = msg[:i] + "continue that run with mixprec.Run.resume(%r)" % d + \
        msg[j + len(" (mxp_run_options.resume)"):]
    msg = msg.replace("start this one in a new output.dir",
                      "start this one in a new output.dir (or leave output.dir unset: each "
                      "run then gets runs/version_<N>)")
    return type(e)(msg, e.status)


def _event_dict(e):
    L = _lib.lib()
    buf = ctypes.create_string_buffer(64)
    L.mxp_guard_action_text(e.taken, buf, len(buf))
    taken = buf.value.decode()
    L.mxp_guard_action_text(e.action, buf, len(buf))
    kind = _capi.cstr(L.mxp_guard_event_kind_name(e.kind))
    ev = {"kind": kind, "rule": _capi.cstr(L.mxp_guard_rule_name(e.rule)) if kind == "rule"
          else None,
          "severity": _capi.cstr(L.mxp_severity_name(e.severity)), "step": e.step,
          "value": _nan_to_none(e.value), "threshold": _nan_to_none(e.threshold),
          "window": e.window, "action": buf.value.decode(), "taken": taken,
          "from": _capi.PRECISIONS[e.from_], "to": _capi.PRECISIONS[e.to],
          "rollback_to": e.rollback_to if e.rollback_to >= 0 else None,
          "detail": _capi.cstr(e.detail)}
    if e.site.found:
        ev["site"] = {"pass": "backward" if e.site.backward else "forward",
                      "layer": e.site.layer, "op": _capi.cstr(e.site.op),
                      "count": e.site.count}
    return ev


def _log_progress(info):
    """progress=True without tqdm: one plain line on stderr per report, as
    the CLI's log lines (the logger's INFO lines are not shown by default,
    so this prints rather than logs)."""
    total = max(1, info["total_steps"])
    print("step %d/%d (%.0f%%) epoch %d/%d  loss %.4g  %s%s" % (
        info["step"], info["total_steps"], 100.0 * info["step"] / total, info["epoch"] + 1,
        info["total_epochs"], info["loss"], info["precision"],
        "  scale %g" % info["scale"] if info["scale"] == info["scale"] and info["scale"] != 1
        else ""), file=sys.stderr, flush=True)
