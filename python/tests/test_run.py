"""Run on the built-in world model: seed 001's usage, stats against the
CLI's summary.json, stop, bit-exact resume, guard events against the CLI's
events.jsonl, Ctrl-C, errors."""
import contextlib
import ctypes
import io
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import unittest

import numpy as np

import mixprec
from .util import TmpDirCase, need_cli, run_cli

# A small world model: 16 trajectories x 50 steps, hidden 32 x 2.
SMALL = {"data.trajectories": 16, "data.episode_length": 50, "model.hidden": 32,
         "model.depth": 2, "training.epochs": 2}
STAT_NAMES = ("fp16_enabled_runtime", "overflow_rate", "current_scale", "skipped_steps",
              "total_steps", "precision", "fallbacks", "rollbacks", "guard_events")


def small(tmp, **extra):
    d = dict(SMALL)
    d["output.dir"] = tmp
    d.update(extra)
    return d


def cli_args(d):
    return ["%s=%s" % (k, str(v).lower() if isinstance(v, bool) else v) for k, v in d.items()]


class SeedUsageTest(TmpDirCase):
    def test_seed_001_quick_start(self):
        os.environ["ENABLE_FP16_TRAINING"] = "true"
        model = mixprec.WorldModel(**{k: v for k, v in SMALL.items()})
        model.train(num_epochs=1, batch_size=16)
        self.assertTrue(model._fp16_stats)
        self.assertIs(model._fp16_stats["fp16_enabled_runtime"], True)
        self.assertEqual(model._fp16_stats["precision"], "mixed_fp16")
        rate = model._fp16_stats["overflow_rate"]
        self.assertTrue(0.0 <= rate <= 1.0)
        "%.2f%%" % (rate * 100)
        for k in STAT_NAMES:
            self.assertIn(k, model._fp16_stats)
        self.assertTrue(np.isfinite(model.training_history[-1]["loss"]))

    def test_seed_000_fp32_rollback_check(self):
        os.environ["ENABLE_FP16_TRAINING"] = "false"
        model = mixprec.WorldModel(**SMALL)
        model.train(num_epochs=1, batch_size=16)
        assert model._fp16_stats is None or model._fp16_stats.get("fp16_enabled_runtime") == False  # noqa: E712
        self.assertEqual(model._fp16_stats["precision"], "fp32")


    def test_world_model_checkpoint_round_trip(self):
        model = mixprec.WorldModel(**SMALL)
        model.train(num_epochs=1, batch_size=16)
        self.assertTrue(os.path.isdir(os.path.join(model.output_dir, "checkpoints")))
        saved = model.save_checkpoint(self.path("wm.safetensors"))
        other = mixprec.WorldModel().load_checkpoint(saved)
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(other.state_dict()[k], v, err_msg=k)
        x = np.zeros((3, model.state_dict()["0.weight"].shape[1]), np.float32)
        np.testing.assert_array_equal(other.predict(x), model.predict(x))


# docs/json.md: the summary's core fields, the same for every workload
SUMMARY_CORE = ("schema", "workload", "run_id", "precision", "emulated", "kill_switch",
                "fp16_enabled_runtime", "training_steps", "optimizer_steps", "skipped_steps",
                "overflow_rate", "current_scale", "epochs", "batch_size", "grad_accum_steps",
                "seed", "memory_bytes", "fp32_layers", "fp32_layers_kept", "fp16_accumulate",
                "final_train_loss", "wall_time_s", "samples", "samples_per_s", "guard")


class RunTest(TmpDirCase):
    def test_stats_agree_with_cli_summary(self):
        need_cli(self)
        for prec in ("fp32", "mixed_fp16"):
            with self.subTest(precision=prec):
                a = small(self.path("cli-" + prec), **{"training.precision": prec})
                run_cli("train", "--quiet", *cli_args(a))
                with open(os.path.join(a["output.dir"], "summary.json")) as f:
                    summ = json.load(f)
                b = small(self.path("py-" + prec), **{"training.precision": prec})
                run = mixprec.Run(mixprec.Config(**b))
                st = run.train()
                for k in STAT_NAMES:
                    self.assertIn(k, st)
                self.assertEqual(st["precision"], summ["precision"])
                self.assertEqual(st["fp16_enabled_runtime"], summ["fp16_enabled_runtime"])
                self.assertEqual(st["total_steps"], summ["training_steps"])
                self.assertEqual(st["optimizer_steps"], summ["optimizer_steps"])
                self.assertEqual(st["skipped_steps"], summ["skipped_steps"])
                self.assertEqual(st["overflow_rate"], summ["overflow_rate"])
                self.assertEqual(st["current_scale"], summ["current_scale"])
                self.assertEqual(st["fallbacks"], summ["guard"]["fallbacks"])
                self.assertEqual(st["rollbacks"], summ["guard"]["rollbacks"])
                # same computation, same numbers: the binding adds nothing numerical
                self.assertAlmostEqual(st["epoch_mean_loss"], summ["final_train_loss"],
                                       delta=1e-6 * abs(summ["final_train_loss"]))
                self.assertAlmostEqual(run.evaluate()["loss"], summ["val_loss"],
                                       delta=1e-6 * abs(summ["val_loss"]))
                # the Run writes the CLI's summary.json: one writer, one schema
                with open(os.path.join(b["output.dir"], "summary.json")) as f:
                    py = json.load(f)
                self.assertEqual(summ["schema"], "mixprec.summary/1")
                self.assertEqual(sorted(py), sorted(summ))
                for k in SUMMARY_CORE:
                    self.assertIn(k, py)
                for k in ("schema", "workload", "precision", "training_steps", "skipped_steps",
                          "overflow_rate", "current_scale", "memory_bytes", "fp32_layers_kept",
                          "fp16_accumulate", "params", "world_size"):
                    self.assertEqual(py[k], summ[k], k)
                for k in ("precision", "events", "fallbacks", "rollbacks"):
                    self.assertEqual(py["guard"][k], summ["guard"][k], k)
                self.assertAlmostEqual(py["final_train_loss"], summ["final_train_loss"],
                                       delta=1e-6 * abs(summ["final_train_loss"]))
                ev = run.evaluate()["loss"]  # the JSON has 9 significant digits
                self.assertAlmostEqual(py["val_loss"], ev, delta=1e-8 * abs(ev))
                self.assertEqual(run.summary()["run_id"], st["run_id"])
                run.close()

    def test_train_arguments_are_honoured(self):
        b64 = {"training.batch_size": 64}
        run = mixprec.Run(mixprec.Config(**small(self.path("o"), **b64)))
        steps = []
        run2 = mixprec.Run(mixprec.Config(**small(self.path("o2"), **b64)),
                           progress=lambda p: steps.append(p), progress_every=1)
        st1 = run.train(num_epochs=1, batch_size=64)
        st2 = run2.train(num_epochs=1, batch_size=32)
        self.assertGreater(st1["total_steps"], 0)
        # half the batch size: twice the steps (drop-last: within one)
        self.assertLessEqual(abs(st2["total_steps"] - 2 * st1["total_steps"]), 1)
        self.assertEqual(len(steps), st2["total_steps"])
        self.assertEqual([p["step"] for p in steps], list(range(1, len(steps) + 1)))
        for p in steps:
            self.assertEqual(set(p), {"step", "total_steps", "epoch", "total_epochs", "loss",
                                      "scale", "skipped", "precision"})
        self.assertEqual(steps[-1]["loss"], st2["last_loss"])
        st3 = run.train(num_epochs=2)  # another call: continues, config's batch
        self.assertEqual(st3["total_steps"], 3 * st1["total_steps"])
        with self.assertRaises(mixprec.Error) as cm:  # beyond the planned batch
            run.train(num_epochs=1, batch_size=128)
        self.assertIn("batch_size=128", str(cm.exception))

    def test_stop_then_resume_is_bit_exact(self):
        straight = mixprec.Run(mixprec.Config(**small(self.path("a"))))
        st_a = straight.train()
        total = st_a["total_steps"]
        k = total // 3

        out_b = self.path("b")
        run = mixprec.Run(mixprec.Config(**small(out_b)),
                          progress=lambda p: p["step"] == k and run.stop(), progress_every=1)
        st = run.train()
        self.assertTrue(st["stopped"])
        self.assertEqual(st["total_steps"], k)
        self.assertGreaterEqual(st["checkpoints_written"], 1)
        run.close()
        resumed = mixprec.Run.resume(out_b)
        st_b = resumed.train()
        self.assertTrue(st_b["resumed"])
        self.assertEqual(st_b["total_steps"], total)
        self.assertEqual(st_b["last_loss"], st_a["last_loss"])
        sa, sb = straight.state_dict(), resumed.state_dict()
        self.assertEqual(sorted(sa), sorted(sb))
        for n in sa:
            np.testing.assert_array_equal(sa[n], sb[n], err_msg=n)

    def test_train_after_stop_continues_like_the_straight_run(self):
        straight = mixprec.Run(mixprec.Config(**small(self.path("a"))), store=False)
        st_a = straight.train()
        total = st_a["total_steps"]
        k = total // 3
        stops = [k]  # the steps to stop at (the first call's step k only)

        def cb(p):
            if stops and p["step"] == stops[0]:
                stops.pop()
                run.stop()
        run = mixprec.Run(mixprec.Config(**small(self.path("b"))), store=False, progress=cb,
                          progress_every=1)
        self.assertEqual(run.train()["total_steps"], k)
        st = run.train()  # the stop was spent: this call continues to the end
        self.assertFalse(st["stopped"])
        self.assertTrue(st["finished"])
        self.assertEqual(st["total_steps"], total)
        self.assertEqual(st["last_loss"], st_a["last_loss"])
        for n, v in straight.state_dict().items():
            np.testing.assert_array_equal(run.state_dict()[n], v, err_msg=n)
        run.stop()  # between calls: the next call stops after its first step
        self.assertEqual(run.train(num_epochs=1)["total_steps"], total + 1)
        self.assertFalse(run.train(num_epochs=1)["stopped"])

    def test_from_checkpoint_is_the_cli_resume_config(self):
        # one library function (mxp_run_resume_config) for both front ends:
        # the CLI resumes the directory that Config.from_checkpoint describes
        need_cli(self)
        out = self.path("fc")
        run = mixprec.Run(mixprec.Config(**small(out, **{"training.precision": "mixed_bf16"})),
                          init=mixprec.Run(mixprec.Config(**small(self.path("i")))).state_dict())
        self.assertNotEqual(run.config["model.init_from"], "none")
        run.train(num_epochs=1)
        run.close()  # removes the init file: the checkpoint holds the weights
        cfg = mixprec.Config.from_checkpoint(out, training={"lr": 0.125})
        self.assertEqual(cfg["output.dir"], out)
        self.assertTrue(cfg.checkpoint.startswith(os.path.join(out, "checkpoints", "ckpt-")))
        self.assertEqual(cfg["training.precision"], "mixed_bf16")
        self.assertEqual(float(cfg["training.lr"]), 0.125)
        self.assertEqual(cfg["model.init_from"], "none")
        run_cli("train", "--quiet", "--resume", out)  # the gone init file is no error
        with open(os.path.join(out, "summary.json")) as f:
            self.assertTrue(json.load(f)["resumed"])

    def test_validation_early_stopping_and_keep_best(self):
        # min_delta 1e9: only the first validation is a best, so patience 1
        # stops after epoch 2 (hand-computed), of 5
        cfg = small(self.path("v"), **{"training.epochs": 5, "training.eval_every": 1,
                                       "training.early_stop.patience": 1,
                                       "training.early_stop.min_delta": 1e9})
        run = mixprec.Run(mixprec.Config(**cfg))
        st = run.train()
        spe = st["samples_per_epoch"] // 32
        self.assertTrue(st["early_stopped"])
        self.assertFalse(st["stopped"])
        self.assertEqual(st["total_steps"], 2 * spe)
        self.assertEqual(st["evaluations"], 2)
        self.assertEqual(st["best_epoch"], 1)
        best = st["best_checkpoint"]
        self.assertTrue(best and os.path.exists(best), best)
        with open(self.path("v", "summary.json")) as f:
            summary = json.load(f)
        self.assertTrue(summary["validation"]["early_stopped"])
        self.assertAlmostEqual(summary["validation"]["best_val_loss"], st["best_val_loss"],
                               delta=1e-8 * st["best_val_loss"])  # %.9g in the summary
        with contextlib.closing(sqlite3.connect(self.path("v", "metrics.db"))) as db:
            n = db.execute("select count(*) from events where kind='validation'").fetchone()[0]
        self.assertGreaterEqual(n, 2)
        # the best checkpoint holds the weights that scored the best loss
        back = mixprec.Run.resume(best, config={"output.dir": self.path("b")})
        ev = back.evaluate()
        self.assertEqual(ev["loss"], st["best_val_loss"])
        # a config error names the key and the accepted range
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Run(mixprec.Config(**small(self.path("x"),
                                               **{"training.early_stop.patience": 2})))
        self.assertIn("training.eval_every", str(cm.exception))

    def test_save_and_resume_from_file(self):
        run = mixprec.Run(mixprec.Config(**small(self.path("a"))), store=False)
        run.train(num_epochs=1)
        self.assertFalse(os.path.exists(self.path("a", "metrics.db")))
        p = run.save(self.path("one.safetensors"))
        self.assertTrue(os.path.getsize(p) > 0)
        back = mixprec.Run.resume(p, config={"output.dir": self.path("c")})
        for n, v in run.state_dict().items():
            np.testing.assert_array_equal(back.state_dict()[n], v, err_msg=n)

    def test_nan_fault_gives_the_cli_guard_events(self):
        need_cli(self)
        fault = {"training.precision": "mixed_fp16", "fault.kind": "nan", "fault.layer": 2,
                 "fault.step": 31, "fault.count": 10}
        a = small(self.path("cli"), **fault)
        run_cli("train", "--quiet", *cli_args(a))
        cli_ev = []
        with open(os.path.join(a["output.dir"], "events.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e["kind"] == "guard":
                    cli_ev.append(e)
        self.assertTrue(cli_ev, "the CLI run had no guard event")
        run = mixprec.Run(mixprec.Config(**small(self.path("py"), **fault)))
        st = run.train()
        run.close()  # ends the run in the store
        py_ev = st["guard_events"]
        # the Python run's own event log (the library's store) says the same
        with open(self.path("py", "events.jsonl")) as f:
            store_ev = [json.loads(line) for line in f]
        self.assertEqual([(e["step"], e["message"]) for e in store_ev if e["kind"] == "guard"],
                         [(e["step"], e["message"]) for e in cli_ev])
        self.assertEqual(store_ev[-1]["kind"], "run_end")
        db = sqlite3.connect(self.path("py", "metrics.db"))
        n, = db.execute("SELECT count(*) FROM fp16_stats").fetchone()
        db.close()
        self.assertGreater(n, 0)
        self.assertEqual(len(py_ev), len(cli_ev))
        for p, c in zip(py_ev, cli_ev):
            self.assertEqual(p["step"], c["step"])
            self.assertEqual(p["rule"], c["detail"]["rule"])
            self.assertEqual(p["severity"], c["severity"])
            self.assertEqual(p["taken"], c["detail"]["action"])
            self.assertEqual(p["from"], c["detail"]["precision_from"])
            self.assertEqual(p["to"], c["detail"]["precision_to"])
            self.assertEqual(p["detail"], c["message"])
            if c["detail"]["site"]:
                self.assertEqual(p["site"], c["detail"]["site"])
        self.assertEqual(st["precision"], "mixed_bf16")
        self.assertGreaterEqual(st["fallbacks"], 1)
        self.assertGreaterEqual(st["rollbacks"], 1)

    def test_guard_stop_raises_like_the_cli_exit_4(self):
        need_cli(self)
        fault = {"training.precision": "mixed_fp16", "fault.kind": "nan", "fault.layer": 2,
                 "fault.step": 31, "fault.count": 10, "guard.nonfinite_loss.action": "stop"}
        r = run_cli("train", "--quiet", *cli_args(small(self.path("cli"), **fault)),
                    check=False)
        self.assertEqual(r.returncode, 4, r.stderr[-2000:])
        run = mixprec.Run(mixprec.Config(**small(self.path("py"), **fault)))
        with self.assertRaises(mixprec.GuardStop) as cm:
            run.train()
        self.assertIn("nonfinite_loss", str(cm.exception))
        st = run.stats
        self.assertTrue(st["stopped"])
        self.assertEqual(st["guard_events"][-1]["taken"], "stop")
        self.assertEqual(st["guard_events"][-1]["site"]["layer"], 2)

    def test_request_fp32_and_callback_errors(self):
        seen = []

        def cb(p):
            seen.append(p["precision"])
            if p["step"] == 10:
                run.request_fp32()

        run = mixprec.Run(mixprec.Config(**small(self.path("a"),
                                                 **{"training.precision": "mixed_fp16"})),
                          progress=cb, progress_every=1)
        st = run.train(num_epochs=1)
        self.assertEqual(st["precision"], "fp32")
        self.assertFalse(st["fp16_enabled_runtime"])
        self.assertEqual(st["precision_switches"],
                         [{"from": "mixed_fp16", "to": "fp32", "reason": "python"}])
        self.assertEqual(seen[9], "mixed_fp16")
        self.assertEqual(seen[-1], "fp32")

        def bad(p):
            raise ZeroDivisionError("from the callback")
        run2 = mixprec.Run(mixprec.Config(**small(self.path("b"))), progress=bad,
                           progress_every=3)
        with self.assertRaises(ZeroDivisionError):
            run2.train()
        self.assertTrue(run2.stats["stopped"])
        self.assertEqual(run2.stats["total_steps"], 3)

    def test_gil_is_released_while_training(self):
        # No clock in the verdict: this thread can watch the step counter
        # move and stop the run only while the library trains without the
        # GIL. Were the GIL held for the whole call, the first read here
        # would come after train() returned: every step done, none stopped.
        # No log lines meanwhile: a Python log callback would take the GIL.
        mixprec.set_log_level(logging.ERROR)
        self.addCleanup(mixprec.set_log_level, logging.INFO)
        run = mixprec.Run(mixprec.Config(**small(self.path("g"), **{"training.epochs": 20000})),
                          checkpoints=False)
        L = mixprec._lib.lib()
        info = mixprec._capi.RunInfo()
        done = threading.Event()
        box = {}

        def train():
            try:
                box["st"] = run.train()
            finally:
                done.set()
        t = threading.Thread(target=train)
        t.start()
        seen = 0
        while not done.is_set() and seen < 3:
            L.mxp_run_stats(run._live(), ctypes.byref(info))
            seen = info.training_steps
        self.assertFalse(done.is_set(), "train() returned before this thread saw 3 steps")
        run.stop()
        t.join()
        st = box["st"]
        self.assertTrue(st["stopped"])
        self.assertLess(st["total_steps"], info.run_total)

    def test_progress_bar(self):
        buf = io.StringIO()
        run = mixprec.Run(mixprec.Config(**small(self.path("t"))), progress=True,
                          progress_every=10)
        try:
            import tqdm  # noqa: F401
        except ImportError:
            self.skipTest("tqdm is not importable: test_progress_without_tqdm covers this")
        with contextlib.redirect_stderr(buf):
            st = run.train(num_epochs=1)
        self.assertIn("%d/%d" % (st["total_steps"], st["total_steps"]), buf.getvalue())
        self.assertIn("loss=", buf.getvalue())

    def test_progress_without_tqdm(self):
        """Issue 30 item 12: progress=True without tqdm prints plain lines on
        stderr (before: INFO log records, which nothing shows by default)."""
        buf = io.StringIO()
        run = mixprec.Run(mixprec.Config(**small(self.path("t"))), progress=True,
                          progress_every=10)
        saved = sys.modules.get("tqdm")
        sys.modules["tqdm"] = None  # import tqdm raises ImportError
        try:
            with contextlib.redirect_stderr(buf):
                st = run.train(num_epochs=1)
        finally:
            if saved is None:
                del sys.modules["tqdm"]
            else:
                sys.modules["tqdm"] = saved
        lines = buf.getvalue().splitlines()
        n = st["total_steps"]
        self.assertEqual(len(lines), n // 10 + (1 if n % 10 else 0), lines[-3:])
        self.assertTrue(lines[-1].startswith("step %d/%d (100%%) epoch 1/1  loss " % (n, n)),
                        lines[-1])
        self.assertAlmostEqual(float(lines[-1].split("loss ")[1].split()[0]),
                               st["last_loss"], delta=abs(st["last_loss"]) * 1e-3)
        self.assertTrue(lines[-1].rstrip().endswith("fp32"), lines[-1])

    def test_errors_carry_the_library_message(self):
        with self.assertRaises(mixprec.ConfigError):
            mixprec.Run({"training": {"batch_size": 0}})
        run = mixprec.Run(mixprec.Config(**small(self.path("a"))))
        run.train(num_epochs=1)
        run.close()
        with self.assertRaises(mixprec.Error) as cm:  # another run's checkpoints
            mixprec.Run(mixprec.Config(**small(self.path("a"))))
        self.assertIn(self.path("a"), str(cm.exception))
        with self.assertRaises(mixprec.Error):
            mixprec.Run.resume(self.path("nowhere"))
        with self.assertRaises(mixprec.Error) as cm:
            run.train()
        self.assertIn("closed", str(cm.exception))

    def test_ctrl_c_stops_at_a_step_boundary(self):
        out = self.path("int")
        code = (
            "import sys, mixprec\n"
            "cfg = mixprec.Config(**%r)\n"
            "run = mixprec.Run(cfg, progress=lambda p: print('step', p['step'], flush=True),"
            " progress_every=5)\n"
            "try:\n"
            "    run.train(num_epochs=5000)\n"
            "except KeyboardInterrupt:\n"
            "    st = run.stats\n"
            "    print('interrupted', st['stopped'], st['checkpoints_written'], flush=True)\n"
            "    sys.exit(3)\n"
            "print('finished', flush=True)\n") % (small(out),)
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=dict(os.environ))
        first = p.stdout.readline()
        if not first.startswith("step"):
            p.kill()
            self.fail("no progress line: %r %s" % (first, p.communicate()[1]))
        p.send_signal(signal.SIGINT)
        rest, err = p.communicate(timeout=600)
        self.assertEqual(p.returncode, 3, rest + err)
        self.assertIn("interrupted True", rest)
        self.assertNotIn("interrupted True 0", rest)  # a checkpoint was written
        back = mixprec.Run.resume(out)
        self.assertTrue(back.stats["resumed"])


if __name__ == "__main__":
    unittest.main()
