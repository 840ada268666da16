"""`destila train`'s Python parse (the live parser) names a config file's bad value by file, line and key, and a
JSON-object option's bad text by its flag, as the early answers on the command line do."""

from __future__ import annotations

import pytest

from destila.cli.train import parse


def test_a_config_value_of_the_wrong_type_names_the_file_line_and_key(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("seed: 3\nmax_steps: 4\nlearning_rate: fast\nuse_cpu: maybe\n")
    with pytest.raises(ValueError) as refused:
        parse(["s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"), "--config", str(config)])
    assert str(refused.value) == (f"--config {config}, line 3: learning_rate: expected a number, found 'fast'; "
                                  "line 4: use_cpu: expected true or false, found 'maybe'; fix the file (flags on "
                                  "the command line override it)")


def test_a_config_value_out_of_its_choices_names_the_file_line_and_key_in_either_spelling(tmp_path):
    config = tmp_path / "run.json"
    config.write_text('{"seed": 3,\n "lr-scheduler-type": "wavy"}\n')
    with pytest.raises(ValueError, match=rf"^--config {config}, line 2: lr-scheduler-type: expected one of linear, "):
        parse(["s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"), "--config", str(config)])


def test_a_config_value_that_is_not_the_json_object_it_should_be_names_the_file(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("lr_scheduler_kwargs: '{bad'\n")
    with pytest.raises(ValueError, match=rf"^--config {config}, line 1: lr_scheduler_kwargs: expected a JSON object"):
        parse(["s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"), "--config", str(config)])


def test_text_that_is_not_a_json_object_is_one_line_naming_the_flag(tmp_path):
    with pytest.raises(ValueError) as refused:
        parse(["s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"), "--lr_scheduler_kwargs", "{bad"])
    assert str(refused.value) == ("--lr_scheduler_kwargs: expected a JSON object such as '{\"num_cycles\": 2}', found "
                                  "'{bad' (not JSON: Expecting property name enclosed in double quotes at column 2)")


def test_a_json_object_and_a_config_mapping_are_taken(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("lr_scheduler_kwargs: {num_cycles: 2}\n")
    _, args = parse(["s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"), "--config", str(config)])
    assert args.lr_scheduler_kwargs == {"num_cycles": 2}
    _, args = parse(["s", "--cache", str(tmp_path), "-o", str(tmp_path / "p"), "--lr_scheduler_kwargs",
                     '{"num_cycles": 3}'])
    assert args.lr_scheduler_kwargs == {"num_cycles": 3}
