"""Doors × keys: the same values through every door resolve to one objective (compared as the run record's data).

The doors: `destila train`'s flags, a ``--config`` YAML, ``DistillationArguments``, TRL's ``GKDConfig``,
``SFTConfig`` and ``DistillationConfig`` (the last three as ``DistillationTrainer(args=...)`` reads them). A door
that has no word for one of a row's keys takes part only where what it implies for that key (its class's
defaults: GKD's loss has no cross-entropy, ...) is the row's value. Nothing trains here: each door's arguments are
resolved and their objective and trajectory (:func:`destila.training.objective.objective_of`) compared.
"""

import warnings

import pytest
import yaml

from destila.cli.train import parse
from destila.training import DistillationArguments, DistillationTrainer
from destila.training.objective import objective_of
from destila.training.trl_args import as_distillation_arguments

from conftest import TRAIN_SEQ_LEN

trl = pytest.importorskip("trl")

# The Trainer's settings every row gives (TRL's and destila's defaults differ; each row names its own).
SCHEDULE = {"learning_rate": 1e-4, "lr_scheduler_type": "linear", "warmup_steps": 0}
# (row id, values in the doors' shared words, the objective expected)
ROWS = [
    ("TRL's JSD at β 0.5", {"beta": 0.5, "temperature": 1.0, "hard_weight": 0.0}, {"divergence": "jsd", "beta": 0.5}),
    ("beta 0.3 is the JSD", {"beta": 0.3, "temperature": 1.0, "hard_weight": 0.0},
     {"divergence": "jsd", "beta": 0.3}),
    ("beta 0 is forward KL", {"beta": 0.0, "temperature": 1.0, "hard_weight": 0.0}, {"divergence": "forward_kl"}),
    ("beta 1 is reverse KL", {"beta": 1.0, "temperature": 1.0, "hard_weight": 0.0}, {"divergence": "reverse_kl"}),
    ("the JSD named with its β", {"divergence": "jsd", "beta": 0.3, "temperature": 1.0, "hard_weight": 0.0},
     {"divergence": "jsd", "beta": 0.3}),
    ("a divergence named, with both weights", {"divergence": "forward_kl", "temperature": 1.0, "hard_weight": 0.5,
                                               "soft_weight": 2.0}, {"hard_weight": 0.5, "soft_weight": 2.0}),
    ("the loss's temperature", {"beta": 0.3, "temperature": 2.0, "hard_weight": 0.0}, {"temperature": 2.0}),
    ("lmbda 0 is off-policy", {"lmbda": 0.0, "beta": 0.5, "temperature": 1.0, "hard_weight": 0.0},
     {"divergence": "jsd", "beta": 0.5}),
    ("max_length equal to the cache's", {"max_length": TRAIN_SEQ_LEN, "beta": 0.5, "temperature": 1.0,
                                         "hard_weight": 0.0}, {"divergence": "jsd"}),
]
# What a door implies for a key it has no word for (absent: the door cannot take a row with that key).
IMPLIED = {
    "flags": {}, "yaml": {},
    "DistillationArguments": {"lmbda": 0.0},  # trains fixed sequences only
    "GKDConfig": {"hard_weight": 0.0, "soft_weight": 1.0},
    "SFTConfig": {"beta": 0.5, "temperature": 1.0, "hard_weight": 0.0, "soft_weight": 1.0, "lmbda": 0.0},
    "DistillationConfig": {"hard_weight": 0.0, "soft_weight": 1.0},
}
# The keys each door has a word for (beyond the Trainer's SCHEDULE, which all have).
WORDS = {
    "flags": {"beta", "divergence", "temperature", "hard_weight", "soft_weight", "lmbda", "max_length"},
    "yaml": {"beta", "divergence", "temperature", "hard_weight", "soft_weight", "lmbda", "max_length"},
    "DistillationArguments": {"beta", "divergence", "temperature", "hard_weight", "soft_weight"},
    "GKDConfig": {"beta", "divergence", "lmbda", "max_length"},  # its temperature samples: the loss's is 1 (below)
    "SFTConfig": {"max_length"},
    "DistillationConfig": {"beta", "divergence", "temperature"},
}
GKD_BETA = {"forward_kl": 0.0, "reverse_kl": 1.0}  # a divergence in TRL's words: its generalised JSD's end


def in_words(door, values):
    """``values`` in the door's words, or None when the door cannot say them."""
    said = {}
    for key, value in values.items():
        if key == "temperature" and door == "GKDConfig":
            if value != 1.0:  # GKD's loss runs at T 1 whatever its (sampling) temperature
                return None
            continue
        if key in WORDS[door]:
            if key == "divergence" and door in ("GKDConfig", "DistillationConfig"):
                if value == "jsd":  # the row's β says it
                    continue
                key, value = "beta", GKD_BETA[value]
            said[key] = value
        elif IMPLIED[door].get(key, object()) != value:
            return None
    return {**said, **SCHEDULE}


def trl_config(door, out, values):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # trl.experimental's notice, transformers' renames
        if door == "GKDConfig":
            from trl.experimental.gkd import GKDConfig as cls
        else:
            cls = getattr(trl, door)
        return cls(output_dir=str(out), use_cpu=True, **values)


def resolve(door, values, cache, student, tmp_path):
    """The door's arguments for ``values`` (a cache beside them), as DistillationArguments."""
    out = str(tmp_path / door)
    if door == "flags":
        argv = [x for key, value in values.items() for x in (f"--{key}", str(value))]
        return parse([str(student), "--cache", str(cache), "-o", out, *argv])[1]
    if door == "yaml":
        path = tmp_path / f"{door}.yaml"
        path.write_text(yaml.safe_dump(values))
        return parse([str(student), "--cache", str(cache), "-o", out, "--config", str(path)])[1]
    if door == "DistillationArguments":
        return DistillationArguments(output_dir=out, use_cpu=True, **values)
    config = trl_config(door, out, values)
    if "max_length" in values:  # a data key: compared with the cache by the trainer
        return DistillationTrainer(model=str(student), args=config, cache=cache).args
    return as_distillation_arguments(config)


def resolved(args) -> dict:
    """The run record's objective and trajectory of ``args``; β only where the divergence has one."""
    options = dict(objective_of(args)["options"])
    if options["divergence"] != "jsd":
        options.pop("beta")
    return options


@pytest.mark.parametrize("values, expected", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_every_door_resolves_one_objective(values, expected, tiny_cache, fresh_student, tmp_path):
    objectives = {}
    for door in IMPLIED:
        said = in_words(door, values)
        if said is not None:
            objectives[door] = resolved(resolve(door, said, tiny_cache, fresh_student, tmp_path))
    assert {"flags", "yaml"} < set(objectives) and len(objectives) >= 3, objectives.keys()
    first = next(iter(objectives.values()))
    for door, objective in objectives.items():
        assert objective == first, (door, {k: (v, first.get(k)) for k, v in objective.items() if first.get(k) != v})
    assert {k: first[k] for k in expected} == expected
    assert {k: first[k] for k in SCHEDULE} == SCHEDULE


@pytest.mark.parametrize("door", ["flags", "yaml", "GKDConfig", "SFTConfig"])
def test_a_max_length_other_than_the_caches_is_refused_naming_both_at_every_door(door, tiny_cache, fresh_student,
                                                                                  tmp_path):
    values = in_words(door, {"max_length": 128, "beta": 0.5, "temperature": 1.0, "hard_weight": 0.0})
    with pytest.raises(ValueError) as error:
        resolve(door, values, tiny_cache, fresh_student, tmp_path)
    assert "max_length 128 (the cache in" in str(error.value) and "seq_len 32" in str(error.value)
