"""mixprec._torch: a run's MLP as a torch.nn.Sequential, or an Ensemble of
them (imported only when
torch is; see Run.to_torch), and the two modules of model.layers' residual
blocks and dropout (docs/world_models.md "Residual blocks and dropout"):
Residual(n), the item residual:N, and Layers, the nn.Sequential that runs it.
"""
import torch

_LINEAR, _RELU, _GELU, _TANH, _LAYERNORM = 0, 1, 2, 3, 4
_RESIDUAL, _DROPOUT = 8, 9  # mxp_layer_kind (model.h)


class Residual(torch.nn.Module):
    """residual:N of model.layers: adds the input of the N layers before it
    to their output, y = x + f(x). No parameters; Layers runs it."""

    def __init__(self, n):
        super().__init__()
        self.n = int(n)

    def extra_repr(self):
        return "n=%d" % self.n


class Layers(torch.nn.Sequential):
    """nn.Sequential whose Residual(n) items add the input of the n modules
    before them (state_dict names layers.<i>.weight as mixprec's)."""

    def forward(self, x):
        ins = []
        for m in self:
            ins.append(x)
            x = ins[-1 - m.n] + x if isinstance(m, Residual) else m(x)
        return x


def sequential(mods):
    """Layers(*mods) when mods hold a Residual, else nn.Sequential(*mods)."""
    if any(isinstance(m, Residual) for m in mods):
        return Layers(*mods)
    return torch.nn.Sequential(*mods)


class Ensemble(torch.nn.Module):
    """model.ensemble = E > 1 of a built-in workload: members[e].layers is
    member e's MLP (state_dict names members.<e>.layers.<i>.weight, as
    mixprec's); forward(x) stacks the members' outputs, [E, B, out]."""

    def __init__(self, members):
        super().__init__()
        self.members = torch.nn.ModuleList(members)

    def forward(self, x):
        return torch.stack([m.layers(x) for m in self.members])


def _mlp(spec):
    """The modules of spec's layers, in order."""
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
        elif k == _RESIDUAL:
            mods.append(Residual(spec.layers[i].units))
        elif k == _DROPOUT:
            mods.append(torch.nn.Dropout(spec.layers[i].rate))
        else:
            raise NotImplementedError("to_torch: layer %d of kind %d has no nn.Sequential "
                                      "equivalent (MLPs only)" % (i, k))
    return mods


def to_sequential(spec, state_dict):
    """nn.Sequential mirroring spec's layers (names "0.weight", ...), or
    with spec.ensemble > 1 an Ensemble of them, loaded with state_dict;
    strict, so a mismatch raises."""
    if spec.ensemble > 1:
        members = []
        for _ in range(spec.ensemble):
            member = torch.nn.Module()
            member.layers = sequential(_mlp(spec))
            members.append(member)
        mod = Ensemble(members)
    else:
        mod = sequential(_mlp(spec))
    mod.load_state_dict({k: torch.from_numpy(v) for k, v in state_dict.items()})
    return mod
