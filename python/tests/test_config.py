"""Config: keys, precedence (defaults < YAML < environment < overrides), the
kill switch, and ConfigError carrying the library's message."""
import os
import unittest

import mixprec
from .util import TmpDirCase, need_cli, run_cli


class ConfigTest(TmpDirCase):
    def test_defaults_are_fp32(self):
        c = mixprec.Config()
        self.assertEqual(c["training.precision"], "fp32")
        self.assertEqual(c.source("training.epochs"), "default")
        self.assertIn("training.lr", mixprec.Config.keys())

    def test_sections_and_dotted_keys(self):
        c = mixprec.Config(training={"precision": "mixed_bf16", "epochs": 2,
                                     "loss_scale": {"init": 1024.0}},
                           **{"model.hidden": 32})
        self.assertEqual(c["training.precision"], "mixed_bf16")
        self.assertEqual(c["training.epochs"], "2")
        self.assertEqual(float(c["training.loss_scale.init"]), 1024.0)
        self.assertEqual(c["model.hidden"], "32")
        self.assertEqual(c.source("model.hidden"), "cli")

    def test_unknown_key_raises_library_message(self):
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Config(training={"precison": "fp16"})
        msg = str(cm.exception)
        self.assertIn("training.precison", msg)
        self.assertIn("training.precision", msg)  # the suggestion
        self.assertEqual(cm.exception.status, "config_error")
        self.assertIsInstance(cm.exception, ValueError)

    def test_bad_value_names_accepted_range(self):
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Config(training={"epochs": 0})
        self.assertIn("training.epochs=0", str(cm.exception))
        self.assertIn(">= 1", str(cm.exception))
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Config(training={"precision": "fp64"})
        self.assertIn("fp64", str(cm.exception))
        with self.assertRaises(mixprec.ConfigError):
            mixprec.Config(training={"lr": float("nan")})

    def test_bad_yaml_file(self):
        with self.assertRaises(mixprec.Error) as cm:
            mixprec.Config.from_yaml(self.path("missing.yaml"))
        self.assertIn("missing.yaml", str(cm.exception))
        p = self.path("bad.yaml")
        with open(p, "w") as f:
            f.write("training:\n  batch_size: -3\n")
        with self.assertRaises(mixprec.ConfigError) as cm:
            mixprec.Config.from_yaml(p)
        self.assertIn("batch_size", str(cm.exception))

    def test_precedence(self):
        p = self.path("run.yaml")
        with open(p, "w") as f:
            f.write("training:\n  loss_scale:\n    init: 4096\n    growth_interval: 7\n"
                    "  epochs: 5\n")
        c = mixprec.Config.from_yaml(p)
        self.assertEqual(float(c["training.loss_scale.init"]), 4096.0)
        self.assertEqual(c.source("training.epochs"), "file")
        os.environ["FP16_LOSS_SCALE"] = "8192"
        c = mixprec.Config.from_yaml(p)  # env beats the file
        self.assertEqual(float(c["training.loss_scale.init"]), 8192.0)
        self.assertEqual(c["training.loss_scale.growth_interval"], "7")
        self.assertEqual(c.source("training.loss_scale.init"), "env")
        c = mixprec.Config.from_yaml(p, training={"loss_scale": {"init": 16.0}})
        self.assertEqual(float(c["training.loss_scale.init"]), 16.0)  # overrides beat env
        self.assertEqual(c.source("training.loss_scale.init"), "cli")
        c2 = c.with_overrides(training={"epochs": 1})
        self.assertEqual(c2["training.epochs"], "1")
        self.assertEqual(c["training.epochs"], "5")

    def test_env_enables_fp16_and_kill_switch_wins(self):
        os.environ["ENABLE_FP16_TRAINING"] = "true"
        self.assertEqual(mixprec.Config()["training.precision"], "mixed_fp16")
        os.environ["ENABLE_FP16_TRAINING"] = "false"
        with self.assertLogs("mixprec", level="WARNING") as logs:
            c = mixprec.Config(training={"precision": "mixed_fp16"})
        self.assertEqual(c["training.precision"], "fp32")
        self.assertEqual(c.source("training.precision"), "kill-switch")
        self.assertTrue(any("FP16 training disabled - using FP32" in m for m in logs.output))
        del os.environ["ENABLE_FP16_TRAINING"]
        os.environ["MIXPREC_FORCE_FP32"] = "1"
        self.assertEqual(mixprec.Config(training={"precision": "bf16"})["training.precision"],
                         "fp32")

    def test_show_matches_cli(self):
        need_cli(self)
        p = self.path("run.yaml")
        with open(p, "w") as f:
            f.write("training:\n  epochs: 4\n")
        c = mixprec.Config.from_yaml(p, training={"lr": 0.003}, model={"hidden": 48})
        r = run_cli("config", "show", *c.args())
        self.assertEqual(c.show().strip(), r.stdout.strip())


if __name__ == "__main__":
    unittest.main()
