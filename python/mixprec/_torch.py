"""mixprec._torch: a run's MLP as a torch.nn.Sequential (imported only when
torch is; see Run.to_torch)."""
import torch

_LINEAR, _RELU, _GELU, _TANH, _LAYERNORM = 0, 1, 2, 3, 4


def to_sequential(spec, state_dict):
    """nn.Sequential mirroring spec's layers, loaded with state_dict (names
    "0.weight", ...); strict, so a mismatch raises."""
    mods, width = [], spec.in_dim
    for i in range(spec.n_layers):
        k = spec.layers[i].kind
        if k == _LINEAR:
            mods.append(torch.nn.Linear(width, spec.layers[i].units))
            width = spec.layers[i].units
        elif k == _RELU:
            mods.append(torch.nn.ReLU())
        elif k == _GELU:
            mods.append(torch.nn.GELU())
        elif k == _TANH:
            mods.append(torch.nn.Tanh())
        elif k == _LAYERNORM:
            mods.append(torch.nn.LayerNorm(width, eps=spec.layernorm_eps))
        else:
            raise NotImplementedError("to_torch: layer %d of kind %d has no nn.Sequential "
                                      "equivalent (MLPs only)" % (i, k))
    seq = torch.nn.Sequential(*mods)
    seq.load_state_dict({k: torch.from_numpy(v) for k, v in state_dict.items()})
    return seq
