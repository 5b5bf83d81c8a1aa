"""mixprec.world_model: seed 001's WorldModel usage over a Run.

    model = mixprec.WorldModel()                 # environment: ENABLE_FP16_TRAINING, ...
    model.train(num_epochs=1, batch_size=16)
    if model._fp16_stats:
        print(model._fp16_stats["fp16_enabled_runtime"], model._fp16_stats["overflow_rate"])
    model.training_history[-1]["loss"]

The world model workload (model.workload=world_model) on the built-in
pendulum physics, or on the caller's obs/actions/rewards arrays. The run is
made at the first train() (so the environment the caller sets after
construction still counts, as in the seeds) and kept across calls: a second
train() continues from the weights of the first. Unless the config sets
training.batch_size, the first train()'s batch_size becomes it (the run
plans memory for it: later calls may use it or smaller). Without output.dir in
the config the run writes where the CLI's would, a directory of its own,
runs/version_<N> (model.output_dir; runs/latest links to the newest), so two
models never collide and nothing is left in /tmp.
"""
from .config import Config
from .run import Run


class WorldModel:
    def __init__(self, config=None, data=None, model=None, **sections):
        self._config_arg = config
        self._sections = sections
        self._data = data
        self._layers = model
        self._run = None
        self._fp16_stats = None
        self.training_history = []
        self.output_dir = None

    def _make_run(self, batch_size):
        c = self._config_arg
        if c is None:
            c = Config(**self._sections)
        elif isinstance(c, dict):
            c = Config(**c, **self._sections)
        elif self._sections:
            c = c.with_overrides(**self._sections)
        extra = {"model.workload": "world_model"}
        if batch_size and c.source("training.batch_size") == "default":
            # the run plans its memory for the configured batch, the largest
            # a train() call may ask for: the first call's, as the seeds use it
            extra["training.batch_size"] = int(batch_size)
        c = c.with_overrides(**extra)
        run = Run(c, data=self._data, model=self._layers)
        self.output_dir = run.output_dir
        return run

    @property
    def run(self):
        """The underlying mixprec.Run (made on first use)."""
        if self._run is None:
            self._run = self._make_run(None)
        return self._run

    def train(self, num_epochs=1, batch_size=16):
        """Train num_epochs epochs at batch_size; returns and keeps the
        statistics in self._fp16_stats; appends {"epoch", "loss",
        "val_loss", ...} to self.training_history."""
        if self._run is None:
            self._run = self._make_run(batch_size)
        st = self._run.train(num_epochs, batch_size)
        self._fp16_stats = st
        ev = self._run.evaluate()
        self.training_history.append({"epoch": st["epoch"], "step": st["total_steps"],
                                      "loss": st["epoch_mean_loss"], "val_loss": ev["loss"],
                                      "precision": st["precision"],
                                      "overflow_rate": st["overflow_rate"]})
        return st

    def get_stats(self):
        return self._fp16_stats

    def predict(self, x):
        return self.run.predict(x)

    def state_dict(self):
        return self.run.state_dict()

    def save_checkpoint(self, path):
        return self.run.save(path)

    def load_checkpoint(self, path):
        """Continue from a checkpoint (file or run directory) with its config
        (the environment and this model's sections on top)."""
        if self._run is not None:
            self._run.close()
        self._run = Run.resume(path, config=self._sections or None, data=self._data)
        return self
