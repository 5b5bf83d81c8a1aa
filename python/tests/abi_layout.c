/* abi_layout.c: sizes and field offsets of the C structs that the Python
 * package mirrors with ctypes (mixprec/_capi.py, predict.py), printed as
 * "struct size" and "struct.field offset" lines; test_abi.py compiles this
 * against include/ and compares with the ctypes layouts. */
#include <stddef.h>
#include <stdio.h>

#include <mixprec/mixprec.h>
#include <mixprec/dataset.h>
#include <mixprec/predict.h>
#include <mixprec/run.h>

#define S(T) printf("%s %zu\n", #T, sizeof(T))
#define F(T, f) printf("%s.%s %zu\n", #T, #f, offsetof(T, f))

int main(void) {
    S(mxp_error); F(mxp_error, msg);
    S(mxp_nonfinite_site); F(mxp_nonfinite_site, layer); F(mxp_nonfinite_site, op);
    F(mxp_nonfinite_site, count);
    S(mxp_step_result); F(mxp_step_result, scale); F(mxp_step_result, grad_norm);
    F(mxp_step_result, nonfinite); F(mxp_step_result, site); F(mxp_step_result, fallback);
    S(mxp_run_progress); F(mxp_run_progress, result);
    S(mxp_guard_event); F(mxp_guard_event, step); F(mxp_guard_event, action);
    F(mxp_guard_event, taken); F(mxp_guard_event, from); F(mxp_guard_event, to);
    F(mxp_guard_event, rollback_to); F(mxp_guard_event, site); F(mxp_guard_event, detail);
    S(mxp_run_observer); F(mxp_run_observer, precision_changed);
    F(mxp_run_observer, guard_event); F(mxp_run_observer, end); F(mxp_run_observer, destroy);
    F(mxp_run_observer, evaluated);
    S(mxp_run_options); F(mxp_run_options, observer); F(mxp_run_options, progress);
    F(mxp_run_options, checkpoints); F(mxp_run_options, resume);
    S(mxp_run_eval); F(mxp_run_eval, loss); F(mxp_run_eval, bits_per_char);
    F(mxp_run_eval, open_loop);
    F(mxp_run_eval, mse); F(mxp_run_eval, members); F(mxp_run_eval, elites);
    F(mxp_run_eval, member_loss);
    S(mxp_run_info); F(mxp_run_info, loss_scale); F(mxp_run_info, precision);
    F(mxp_run_info, emulated); F(mxp_run_info, last_loss); F(mxp_run_info, stopped);
    F(mxp_run_info, checkpoints_written); F(mxp_run_info, last_checkpoint);
    F(mxp_run_info, run_id); F(mxp_run_info, workload);
    F(mxp_run_info, val_loss); F(mxp_run_info, best_val_loss); F(mxp_run_info, best_epoch);
    F(mxp_run_info, best_step);
    F(mxp_run_info, evaluations); F(mxp_run_info, early_stopped);
    F(mxp_run_info, best_checkpoint);
    S(mxp_layer_spec); S(mxp_model_spec); F(mxp_model_spec, layers); F(mxp_model_spec, loss);
    F(mxp_model_spec, layernorm_eps); F(mxp_model_spec, seq_len); F(mxp_model_spec, embed_scale);
    F(mxp_model_spec, ensemble);
    S(mxp_tensor_info); F(mxp_tensor_info, ndim); F(mxp_tensor_info, shape);
    S(mxp_array); F(mxp_array, shape); F(mxp_array, numel); F(mxp_array, data);
    S(mxp_obs_settings); F(mxp_obs_settings, http_port); F(mxp_obs_settings, token_file);
    F(mxp_obs_settings, http_linger_s); F(mxp_obs_settings, store_enabled);
    F(mxp_obs_settings, store_events); F(mxp_obs_settings, flush_seconds);
    F(mxp_obs_settings, fp32_baseline_loss);
    printf("mxp_config %zu\n", sizeof(mxp_config));
    return 0;
}
