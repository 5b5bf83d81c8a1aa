"""mixprec.world_model: the seeds' WorldModel usage over a Run.

    model = mixprec.WorldModel()                 # environment: ENABLE_FP16_TRAINING, ...
    model.replay_buffer = buffer                 # optional: the team's own transitions
    model.train(num_epochs=1, batch_size=16)     # or: await model.train(...)
    if model._fp16_stats:
        print(model._fp16_stats["fp16_enabled_runtime"], model._fp16_stats["overflow_rate"])
    model.training_history[-1]["loss"]

The world model workload (model.workload=world_model) on the built-in
pendulum physics, or on the caller's data: `replay_buffer` (constructor
argument or attribute; `data` is the same thing) takes flat transitions
(obs, actions, rewards, next_obs, terminals/timeouts/dones and the aliases of
docs/data.md), episodes (obs [E, T+1, S], ...), a list of transition dicts or
(obs, action, reward, next_obs, done) tuples, or a Stable-Baselines3
ReplayBuffer (mixprec._data.buffer_arrays). The run is made at the first
train() (so the environment and the buffer the caller sets after
construction still count, as in the seeds) and kept across calls: a second
train() continues from the weights of the first. A buffer set after training
began takes effect at the next train(): a new run on the new data, started
from the current weights (the standardisation is recomputed on the new data;
optimizer moments and the learning-rate schedule start afresh).

train() trains when called and returns the statistics (a dict); the dict is
also awaitable, so `await model.train(...)` in a coroutine works as the seeds
write it. The training runs in the call, not in the event loop: to keep a
loop responsive meanwhile, `await asyncio.to_thread(model.train, ...)`.

Unless the config sets training.batch_size, the first train()'s batch_size
becomes it (the run plans memory for it: later calls may use it or smaller).
Without output.dir in the config the run writes where the CLI's would, a
directory of its own, runs/version_<N> (model.output_dir; runs/latest links
to the newest), so two models never collide and nothing is left in /tmp; a
new buffer's run gets a new one.
"""

from . import _data
from .config import Config
from .errors import Error
from .run import Run


class TrainStats(dict):
    """The statistics train() returns: a dict, and awaitable (the training is
    already done when train() returns; awaiting gives the dict itself)."""

    def __await__(self):
        return self
        yield  # noqa: unreachable - makes __await__ a generator


class WorldModel:
    def __init__(self, config=None, data=None, model=None, replay_buffer=None, **sections):
        if data is not None and replay_buffer is not None:
            raise Error("WorldModel: data and replay_buffer are the same thing; accepted: one "
                        "of them", "invalid_arg")
        self._config_arg = config
        self._sections = sections
        self._data = None
        self._buffer = None
        self._buffer_changed = False
        self._layers = model
        self._run = None
        self._fp16_stats = None
        self.training_history = []
        self.output_dir = None
        if data is not None or replay_buffer is not None:
            self.replay_buffer = replay_buffer if replay_buffer is not None else data

    @property
    def replay_buffer(self):
        """The data the model trains on (None: the built-in pendulum), as it
        was given."""
        return self._buffer

    @replay_buffer.setter
    def replay_buffer(self, buf):
        if buf is None:
            data = None
        elif isinstance(buf, (str, bytes)) or hasattr(buf, "__fspath__"):
            data = buf  # a data file: data.path
        else:
            data = _data.buffer_arrays(buf)
        self._buffer = buf
        self._data = data
        self._buffer_changed = self._run is not None

    def _config(self, batch_size):
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
        return c.with_overrides(**extra)

    def _make_run(self, batch_size, init=None):
        c = self._config(batch_size)
        self._buffer_changed = False
        run = Run(c, data=self._data, model=self._layers, init=init)
        self.output_dir = run.output_dir
        return run

    @property
    def run(self):
        """The underlying mixprec.Run (made on first use)."""
        if self._run is None:
            self._run = self._make_run(None)
        return self._run

    @property
    def fp16_enabled(self):
        """Whether the model trains in FP16: the run's current precision once
        it exists, else what the config (environment included) asks for."""
        if self._run is not None:
            return bool(self._run.stats["fp16_enabled_runtime"])
        return self._config(None)["training.precision"] in ("fp16", "mixed_fp16")

    def train(self, num_epochs=1, batch_size=16):
        """Train num_epochs epochs at batch_size on the replay buffer (or
        the built-in data); returns and keeps the statistics in
        self._fp16_stats (a TrainStats: `await model.train(...)` works too);
        appends {"epoch", "step", "loss", "val_loss", ...} to
        self.training_history."""
        if self._run is None:
            self._run = self._make_run(batch_size)
        elif self._buffer_changed:
            old = self._run
            weights = old.state_dict()
            self._run = self._make_run(batch_size, init=weights)
            old.close()
        st = TrainStats(self._run.train(num_epochs, batch_size))
        self._fp16_stats = st
        ev = self._run.evaluate()
        self.training_history.append({"epoch": st["epoch"], "step": st["total_steps"],
                                      "loss": st["epoch_mean_loss"], "val_loss": ev["loss"],
                                      "precision": st["precision"],
                                      "overflow_rate": st["overflow_rate"]})
        return st

    def get_stats(self):
        return self._fp16_stats

    def predict(self, x=None, **arrays):
        """Run.predict: x [B, D] straight through the model (a termination
        head's logit in the last column), or obs=, actions= -> the dict of
        `mixprec predict` in the data's units (next_obs, reward, and with
        model.termination terminal_prob; docs/world_models.md)."""
        return self.run.predict(x, **arrays)

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
        self._buffer_changed = False
        return self
