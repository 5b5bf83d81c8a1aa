"""mixprec._capi: ctypes mirrors of the C structs the Run wraps, and the
declarations of the run, model and checkpoint functions it calls.

Each Structure copies one struct of include/mixprec/*.h field for field
(ctypes lays them out with the C ABI's alignment). Keep them in step with
the headers: run.h (mxp_run_options, mxp_run_eval, mxp_run_info,
mxp_run_progress, mxp_run_observer), train.h (mxp_step_result), model.h
(mxp_model_spec, mxp_tensor_info, mxp_nonfinite_site, mxp_transfer_stats), guard.h
(mxp_guard_event).
"""
import ctypes
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int,
                    c_int64, c_size_t, c_uint, c_uint64, c_void_p)

from . import _lib

MODEL_MAX_LAYERS = 64
MODEL_MAX_ENSEMBLE = 64  # MXP_MODEL_MAX_ENSEMBLE (model.h)
CKPT_PATH_MAX = 1024
PRECISIONS = ("fp32", "mixed_bf16", "mixed_fp16", "bf16", "fp16", "fp8")
DTYPE_F32, DTYPE_BF16, DTYPE_F16 = 0, 1, 2
TENSOR_PARAM = 0  # mxp_tensor_role (model.h)
ACT_ALERT, ACT_FALLBACK, ACT_ROLLBACK, ACT_STOP = 1, 2, 4, 8


class NonfiniteSite(Structure):
    _fields_ = [("found", c_bool), ("backward", c_bool), ("layer", c_int),
                ("op", c_char_p), ("count", c_int64)]


class StepResult(Structure):
    _fields_ = [("loss", c_double), ("skipped", c_bool), ("scale", c_float),
                ("grad_norm", c_double), ("zero_frac", c_double),
                ("near_overflow_frac", c_double), ("nonfinite", c_int64),
                ("site", NonfiniteSite), ("fallback", c_bool)]


class RunProgress(Structure):
    _fields_ = [("step", c_int64), ("total_steps", c_int64), ("epoch", c_int64),
                ("total_epochs", c_int64), ("result", POINTER(StepResult))]


class GuardEvent(Structure):
    _fields_ = [("kind", c_int), ("rule", c_int), ("severity", c_int), ("step", c_int64),
                ("value", c_double), ("threshold", c_double), ("window", c_int64),
                ("action", c_uint), ("taken", c_uint), ("from_", c_int), ("to", c_int),
                ("rollback_to", c_int64), ("site", NonfiniteSite),
                ("detail", c_char * 512)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, c_void_p, POINTER(RunProgress))
OBS_BEGIN_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p)
OBS_STEP_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, POINTER(RunProgress))
OBS_PRECISION_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_int, c_int, c_char_p)
OBS_GUARD_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, POINTER(GuardEvent))
OBS_END_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_bool, c_bool, c_char_p)
OBS_DESTROY_FN = ctypes.CFUNCTYPE(None, c_void_p)
OBS_EVAL_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, c_void_p)


class RunObserver(Structure):
    _fields_ = [("self", c_void_p), ("begin", OBS_BEGIN_FN), ("step", OBS_STEP_FN),
                ("precision_changed", OBS_PRECISION_FN), ("guard_event", OBS_GUARD_FN),
                ("end", OBS_END_FN), ("destroy", OBS_DESTROY_FN), ("evaluated", OBS_EVAL_FN)]


class RunOptions(Structure):
    _fields_ = [("provider", c_void_p), ("data", c_void_p), ("comm", c_void_p),
                ("observer", POINTER(RunObserver)), ("progress", PROGRESS_FN),
                ("progress_user", c_void_p), ("checkpoints", c_bool), ("resume", c_char_p)]


OPEN_LOOP_HORIZONS = (1, 5, 10)  # mxp_open_loop_horizon(i), MXP_OPEN_LOOP_N


class RunEval(Structure):
    _fields_ = [("name", c_char * 16), ("loss", c_double), ("accuracy", c_double),
                ("bits_per_char", c_double), ("mse", c_double),
                ("open_loop", c_double * len(OPEN_LOOP_HORIZONS)), ("bce", c_double),
                ("members", c_int), ("elites", c_uint64),
                ("member_loss", c_double * MODEL_MAX_ENSEMBLE)]

    def member_fields(self):
        """An ensemble's {"member_loss": [E losses], "elites": [indices]}
        (docs/world_models.md "Elites"); {} for one model."""
        if self.members < 2:
            return {}
        return {"member_loss": [None if x != x else float(x)
                                for x in self.member_loss[:self.members]],
                "elites": [e for e in range(self.members) if self.elites >> e & 1]}

    def open_loop_dict(self):
        """{k: error after k steps} for world models, else None."""
        v = [float(x) for x in self.open_loop]
        if all(x != x for x in v):
            return None
        return {k: (None if x != x else x) for k, x in zip(OPEN_LOOP_HORIZONS, v)}


class RunInfo(Structure):
    _fields_ = [("training_steps", c_int64), ("optimizer_steps", c_int64),
                ("skipped_steps", c_int64), ("overflow_rate", c_double),
                ("loss_scale", c_float), ("precision", c_int), ("emulated", c_bool),
                ("epoch", c_int64), ("step_in_epoch", c_int64), ("run_step", c_int64),
                ("run_total", c_int64), ("samples_per_epoch", c_int64),
                ("samples_trained", c_int64), ("last_loss", c_double),
                ("epoch_mean_loss", c_double), ("wall_s", c_double), ("stopped", c_bool),
                ("finished", c_bool), ("resumed", c_bool), ("finished_before_resume", c_bool),
                ("checkpoints_written", c_int64), ("last_checkpoint", c_char * CKPT_PATH_MAX),
                ("run_id", c_char * 40), ("workload", c_char * 32),
                ("val_loss", c_double), ("best_val_loss", c_double), ("best_epoch", c_int64),
                ("best_step", c_int64),
                ("evaluations", c_int64), ("evals_since_best", c_int64),
                ("early_stopped", c_bool), ("best_checkpoint", c_char * CKPT_PATH_MAX)]


class LayerSpec(Structure):
    _fields_ = [("kind", c_int), ("units", c_int64), ("rate", c_double)]


class ModelSpec(Structure):
    _fields_ = [("in_dim", c_int64), ("max_batch", c_int64), ("n_layers", c_int),
                ("layers", LayerSpec * MODEL_MAX_LAYERS), ("loss", c_int),
                ("layernorm_eps", c_float), ("seq_len", c_int64), ("vocab_size", c_int64),
                ("n_heads", c_int), ("embed_scale", c_float), ("ensemble", c_int),
                ("termination", c_int), ("target_weights", POINTER(c_float))]


class TensorInfo(Structure):
    _fields_ = [("name", c_char_p), ("offset", c_size_t), ("count", c_size_t),
                ("ndim", c_int), ("shape", c_int64 * 2)]


class TransferStats(Structure):
    _fields_ = [("d2h_calls", ctypes.c_uint64), ("d2h_bytes", ctypes.c_uint64),
                ("h2d_calls", ctypes.c_uint64), ("h2d_bytes", ctypes.c_uint64)]


_declared = False


def declare():
    """Declare the run/model/checkpoint functions on the loaded library
    (once; _lib.lib() has checked its ABI version)."""
    global _declared
    L = _lib.lib()
    if _declared:
        return L
    P, E = c_void_p, POINTER(_lib.CError)
    f = _lib._fn
    f(L, "mxp_run_options_default", RunOptions)
    f(L, "mxp_run_create", c_int, P, POINTER(RunOptions), POINTER(c_void_p), E)
    f(L, "mxp_run_destroy", None, P)
    f(L, "mxp_run_resume", c_int, P, c_char_p, E)
    f(L, "mxp_run_train", c_int, P, c_int64, c_int64, E)
    f(L, "mxp_run_request_stop", None, P)
    f(L, "mxp_run_request_precision", None, P, c_int, c_char_p)
    f(L, "mxp_run_evaluate", c_int, P, POINTER(RunEval), E)
    f(L, "mxp_run_save", c_int, P, c_char_p, E)
    f(L, "mxp_run_stats", None, P, POINTER(RunInfo))
    f(L, "mxp_run_stats_json", c_int, P, c_char_p, c_size_t)
    f(L, "mxp_run_summary_json", c_int, P, POINTER(RunEval), c_double, c_char_p, c_size_t)
    f(L, "mxp_run_model", P, P)
    f(L, "mxp_run_elites", c_uint64, P)
    f(L, "mxp_run_config", P, P)
    f(L, "mxp_model_get_spec", POINTER(ModelSpec), P)
    f(L, "mxp_model_out_dim", c_int64, P)
    f(L, "mxp_model_num_params", c_size_t, P)
    f(L, "mxp_model_predict", c_int, P, P, c_int64, P, E)
    f(L, "mxp_model_num_tensors", c_int, P)
    f(L, "mxp_model_tensor", POINTER(TensorInfo), P, c_int)
    f(L, "mxp_model_tensor_get", c_int, P, c_int, c_char_p, c_int, P, c_size_t, E)
    f(L, "mxp_model_transfers", None, P, POINTER(TransferStats))
    f(L, "mxp_precision_name", c_char_p, c_int)
    f(L, "mxp_guard_rule_name", c_char_p, c_int)
    f(L, "mxp_guard_event_kind_name", c_char_p, c_int)
    f(L, "mxp_severity_name", c_char_p, c_int)
    f(L, "mxp_guard_action_text", None, c_uint, c_char_p, c_size_t)
    f(L, "mxp_ckpt_find_latest", c_int, c_char_p, c_bool, P, c_char_p, c_size_t, P, E)
    f(L, "mxp_run_dir_reserve", c_int, c_char_p, c_char_p, c_size_t, E)
    f(L, "mxp_run_dir_publish", c_int, c_char_p, c_char_p, E)
    _declared = True
    return L


def cstr(b):
    return b.decode("utf-8", "replace") if b else ""
