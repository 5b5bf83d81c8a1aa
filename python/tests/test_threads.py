"""Threads (issue 30, item 3): close() from another thread during train(),
interpreter exit while a daemon thread trains, and every method called from
a progress callback. Each scenario runs in a child interpreter
(thread_child.py) under a timeout, so a crash is an exit status and a
deadlock a timeout, not a hung suite. Before the fix: SIGSEGV, SIGSEGV, and
a deadlock that two SIGINTs did not end."""
import json
import os
import subprocess
import sys
import unittest

import numpy as np

from mixprec import _ckpt
from .util import TmpDirCase

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "thread_child.py")
TIMEOUT_S = 300  # generous: the suite runs under sanitizers and on a loaded machine


class ThreadTest(TmpDirCase):
    def child(self, mode):
        out = self.path("run")
        try:
            r = subprocess.run([sys.executable, CHILD, out, mode], capture_output=True,
                               text=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.fail("%s: no exit within %d s (a deadlock)" % (mode, TIMEOUT_S))
        self.assertEqual(r.returncode, 0, "%s: exit %d\n%s" % (mode, r.returncode,
                                                               r.stderr[-3000:]))
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
        self.assertEqual(len(lines), 1, r.stdout)
        return json.loads(lines[0][7:]), out

    def test_close_from_another_thread_during_train(self):
        res, out = self.child("close")
        # train() returned first (stopped at a step boundary), then close() freed the run
        self.assertEqual(res["order"], ["trained", "closed"])
        self.assertTrue(res["stopped"])
        self.assertLess(res["steps"], 200 * (512 * 8 // 10) // 32)
        self.assertEqual(res["after"], "the run is closed")
        ckpts = os.listdir(os.path.join(out, "checkpoints"))
        self.assertTrue(any(c.endswith(".safetensors") for c in ckpts), ckpts)

    def test_interpreter_exit_while_a_daemon_thread_trains(self):
        res, out = self.child("daemon")
        self.assertTrue(res["exiting"])
        # the run was stopped at a step boundary and closed: its checkpoint
        # and summary were written
        with open(os.path.join(out, "summary.json")) as f:
            self.assertGreater(json.load(f)["training_steps"], 0)
        self.assertTrue(os.listdir(os.path.join(out, "checkpoints")))

    def check_callback(self, mode):
        res, out = self.child(mode)
        seen = res["seen"]
        # 512 rows, data.val_fraction 0.1: 461 training rows -> 14 steps of 32, 2 epochs
        self.assertEqual(res["steps"], 28)
        self.assertEqual(seen["stats_steps"], 28)
        self.assertEqual(seen["summary_steps"], 28)
        # at the last step boundary the model is the final one: the calls made
        # there see exactly what the calls after train() see
        self.assertEqual(seen["evaluate"], res["evaluate"])
        self.assertEqual(seen["predict"], res["predict"])
        self.assertEqual(seen["state"], res["state"])
        # and they did not disturb training: a run without them ends bit-identical
        self.assertEqual(res["plain_state"], res["state"])
        saved = _ckpt.read_safetensors(res["saved"])
        w = np.asarray(res["state"]["0.weight"], np.float32)
        self.assertTrue(any(v.shape == w.shape and np.array_equal(v, w)
                            for v in saved.values()), sorted(saved))
        # train() and close() are refused at once, naming why and what to do
        for name in ("train", "close"):
            msg = res["refused"][name]
            self.assertIsNotNone(msg, name)
            self.assertIn("progress callback", msg)
            self.assertIn("after train() returns", msg)

    def test_callback_calls_with_train_on_the_main_thread(self):
        self.check_callback("callback_main")

    def test_callback_calls_with_train_on_a_worker_thread(self):
        self.check_callback("callback_thread")


if __name__ == "__main__":
    unittest.main()
