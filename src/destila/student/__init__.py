"""Making a student: layers cut from the teacher (a count, a list, or chosen by measured importance),
optionally narrowed by width pruning, or a fresh smaller model of the teacher's architecture.

    from destila.student import StudentInitSpec, init_student
    summary = init_student(StudentInitSpec("smollm2", "student/", layers=15, select="importance", data="pydoc"))
    summary["kept_layers"], summary["student_parameters"], summary["start_perplexity"]

Every path writes an ordinary ``save_pretrained`` folder with the teacher's
tokenizer, loadable by plain ``transformers``.
"""

from importlib import import_module

# Public name → submodule. Loaded on first use, so that `destila --help` (which
# parses layer lists) does not import torch.
_HOMES = {
    "Calibration": "calibration", "perplexity": "calibration",
    "LAYER_PREFIXES": "cut", "cut_student": "cut",
    "fresh_student": "fresh", "parse_config_overrides": "fresh",
    "contiguous_cut": "importance", "layer_scores": "importance", "most_important": "importance",
    "RECORD": "init", "init_student": "init", "StudentInitSpec": "spec",
    "check_layer_indices": "layers", "evenly_spaced_layers": "layers", "format_layer_list": "layers",
    "parse_layer_list": "layers", "parse_layers": "layers",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'destila.student' has no attribute {name!r}")
    return getattr(import_module(f"destila.student.{_HOMES[name]}"), name)


def __dir__():
    return __all__
