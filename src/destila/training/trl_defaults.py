"""What TRL's ``GKDConfig`` means when a key is left out, and the one line saying what a run trains towards.

A config (or a command line, or a ``GKDConfig`` passed as ``args``) written in
TRL's terms gets TRL's defaults for what it leaves out, read from TRL 1.16's
``trl.experimental.gkd.GKDConfig`` (which extends ``SFTConfig``, so an SFT
YAML is one too): the generalised JSD with β 0.5 at T 1 and no cross-entropy,
learning rate 2e-5 and the Trainer's linear schedule without warm-up. One
holding a key only TRL's ``DistillationConfig`` has gets that class's
defaults instead (reverse KL, T 1, no cross-entropy, learning rate 1e-6:
:mod:`destila.training.trl_distillation`).
Anything else gets destila's own defaults (forward KL plus cross-entropy
1:1, T 1, 5e-4 held constant after a short warm-up). A test reads
``GKDConfig``'s fields and ``GKDTrainer``'s loss to keep :data:`GKD_DEFAULTS`
equal to them.

GKD's ``temperature`` (0.9 by default) is the temperature of the student's
on-policy samples, not the loss's: ``GKDTrainer.compute_loss`` calls
``generalized_jsd_loss`` without it, so TRL's divergence runs at T 1 (a
test reads TRL's source for that). ``destila train`` samples nothing, so in
TRL's terms a ``temperature`` other than 1 is refused with that reason
(:func:`destila.training.trl_keys.trl_temperature_problem`).

Either way :func:`describe_objective` gives the run's first line: the
divergence, β, T, the two weights and the schedule, then which of them are
TRL's defaults and which differ from what a ``GKDConfig`` would run. GKD's
``lmbda`` (0.5 by default: half the batches sampled from the student) is not
run by ``destila train``; the line says so, and where it is run.

Naive equivalent::

    options = {**(GKD_DEFAULTS if trl_terms else {}), **given}
"""

from __future__ import annotations

from destila.training.trl_distillation import DISTILLATION_CONFIG_DEFAULTS, is_distillation_config
from destila.training.trl_keys import ON_POLICY

# GKDConfig's defaults for the objective and the schedule (TRL 1.16): beta is GKDConfig's own, learning_rate
# SFTConfig's, lr_scheduler_type and warmup_steps the Trainer's; beta 0.5 is the JSD with that β, the loss's
# temperature is 1 (GKDConfig's temperature is its sampling temperature), and GKDTrainer.compute_loss adds no
# cross-entropy to the divergence (hard_weight 0).
GKD_DEFAULTS = {
    "divergence": "jsd",
    "beta": 0.5,
    "temperature": 1.0,
    "hard_weight": 0.0,  # GKD's loss is the divergence alone: no cross-entropy term
    "learning_rate": 2e-5,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
}
# GKDConfig's default share of on-policy batches, which `destila train` does not run, and their temperature.
GKD_LMBDA = 0.5
GKD_SAMPLING_TEMPERATURE = 0.9


def trl_defaults(given) -> dict:
    """The defaults of the TRL config ``given`` is written for, less the options in ``given`` (names, TRL's or
    destila's): TRL's ``DistillationConfig``'s (:data:`~destila.training.trl_distillation.DISTILLATION_CONFIG_DEFAULTS`)
    when a key only it has is given, :data:`GKD_DEFAULTS` otherwise. ``beta`` alone already chooses the divergence,
    and a ``divergence`` given keeps its own β unless one is given."""
    given = {str(key).lstrip("-").replace("-", "_") for key in given}
    table = DISTILLATION_CONFIG_DEFAULTS if is_distillation_config(given) else GKD_DEFAULTS
    defaults = {k: v for k, v in table.items() if k not in given}
    if "beta" in given or "divergence" in given:
        defaults.pop("divergence", None)
        defaults.pop("beta", None)
    return defaults


def _plain(value):
    return getattr(value, "value", value)  # SchedulerType and other enums


# The TRL configs a run's line compares with: (their defaults, what TRL would sample that `destila train` does not).
REFERENCES = {
    "GKDConfig": (GKD_DEFAULTS, f"TRL's default lmbda {GKD_LMBDA} samples from the student"),
    "DistillationConfig": (DISTILLATION_CONFIG_DEFAULTS, "TRL's DistillationTrainer samples every batch from the "
                                                         "student"),
}


def nearest_reference(values: dict) -> str:
    """The TRL config of :data:`REFERENCES` whose defaults ``values`` share most (GKDConfig on a tie)."""
    return max(REFERENCES, key=lambda name: sum(values.get(k) == v for k, v in REFERENCES[name][0].items()))


def describe_objective(args) -> str:
    """One line: the objective and the schedule of ``args`` and how they compare with the nearest of TRL's
    ``GKDConfig`` and ``DistillationConfig`` (:func:`nearest_reference`).

    ``objective: jsd β 0.5, T 1, soft 1 + hard 0; schedule: lr 2e-05, linear, warm-up 0 steps. TRL's GKDConfig
    defaults: divergence, beta, ...; off-policy ...``
    """
    values = {name: _plain(getattr(args, name)) for name in GKD_DEFAULTS}
    beta = f" β {values['beta']:g}" if values["divergence"] == "jsd" else ""
    line = (f"objective: {values['divergence']}{beta}, T {values['temperature']:g}, soft {args.soft_weight:g} + "
            f"hard {args.hard_weight:g}; schedule: lr {values['learning_rate']:g}, {values['lr_scheduler_type']}, "
            f"warm-up {values['warmup_steps']:g} steps.")
    name = nearest_reference(values)
    defaults, sampled = REFERENCES[name]
    compared = {k: v for k, v in values.items()
                if k in defaults and not (k == "beta" and values["divergence"] != "jsd")}
    same = [k for k, v in compared.items() if v == defaults[k]]
    differ = [f"{k} {v:g} (TRL {defaults[k]:g})" if isinstance(v, float) else f"{k} {v} (TRL {defaults[k]})"
              for k, v in compared.items() if v != defaults[k]]
    if same:
        line += f" As TRL's {name} defaults: {', '.join(same)}."
    if differ:
        line += f" Not TRL's {name} defaults: {', '.join(differ)}."
    return line + f" Off-policy: fixed sequences only ({sampled}; that is {ON_POLICY})."
