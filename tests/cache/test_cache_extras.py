"""Caches of a mixture of teachers and of teacher hidden states: built through the CLI, checked against
direct computations on the same tiny models; online and offline hidden-state terms agree."""

import json

import pytest
import torch
from conftest import save_tiny_model, shard_metadata_of, train_tiny_tokenizer
from transformers import AutoModelForCausalLM

from destila.cache import TopKCache, read_manifest, verify_cache
from destila.cache.stats import inspect_cache
from destila.cli.main import main
from destila.models import decoder_of, output_head
from destila.targets.mixture import mixture_topk

SMALL = ["--seq-len", "32", "--max-tokens", "512", "--top-k", "8", "--logprob-dtype", "float32", "--no-progress"]


def cli(argv) -> int:
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code


@pytest.fixture(scope="module")
def second_teacher(tmp_path_factory, tiny_tokenizer):
    path = tmp_path_factory.mktemp("second")
    save_tiny_model(path, tiny_tokenizer, seed=5, layers=3, hidden=48)
    return path


def test_mixture_cache_holds_the_mixture_of_both_teachers(tiny_llama_dir, second_teacher, tmp_path):
    out = tmp_path / "mix"
    assert cli(["cache", "build", str(tiny_llama_dir), str(second_teacher), "pydoc", "-o", str(out),
                "--teacher-weights", "0.7,0.3", *SMALL]) == 0
    manifest = read_manifest(out)
    assert manifest.extras["mixture"]["weights"] == [0.7, 0.3]
    assert manifest.extras["mixture"]["teachers"] == [str(second_teacher)]
    assert verify_cache(out).ok
    cache = TopKCache(out)
    models = [AutoModelForCausalLM.from_pretrained(p).eval() for p in (tiny_llama_dir, second_teacher)]
    for index in (0, len(cache) - 1):
        item = cache[index]
        with torch.no_grad():
            hiddens = [decoder_of(m)(input_ids=item["input_ids"][None], position_ids=item["position_ids"][None],
                                     use_cache=False).last_hidden_state[0] for m in models]
        ids, logprobs, tail = mixture_topk(hiddens, [output_head(m) for m in models], [0.7, 0.3], 8)
        trained = item["labels"] != -100
        assert torch.equal(item["topk_ids"][trained], ids[trained])
        assert torch.allclose(item["topk_logprobs"][trained], logprobs[trained], atol=1e-5)
        assert torch.allclose(item["tail_logmass"][trained], tail[trained], atol=1e-5)
    # The same command resumes nothing; other weights are refused before anything is touched.
    assert cli(["cache", "build", str(tiny_llama_dir), str(second_teacher), "pydoc", "-o", str(out),
                "--teacher-weights", "0.7,0.3", *SMALL]) == 0
    before = (out / "manifest.json").read_bytes()
    assert cli(["cache", "build", str(tiny_llama_dir), str(second_teacher), "pydoc", "-o", str(out),
                "--teacher-weights", "0.5,0.5", *SMALL]) == 2
    assert (out / "manifest.json").read_bytes() == before


def test_mixture_refusals(tiny_llama_dir, tmp_path, capsys):
    other = tmp_path / "other"
    tokenizer = train_tiny_tokenizer(vocab_size=300)
    save_tiny_model(other, tokenizer)
    assert cli(["cache", "build", str(tiny_llama_dir), str(other), "pydoc", "-o", str(tmp_path / "c"),
                "--teacher-weights", "1,1", *SMALL]) == 2
    assert "different tokenizer" in capsys.readouterr().err
    assert not (tmp_path / "c" / "manifest.json").exists() or not read_manifest(tmp_path / "c").shards
    assert cli(["cache", "build", str(tiny_llama_dir), str(tiny_llama_dir), "pydoc", "-o", str(tmp_path / "d"),
                *SMALL]) == 2
    assert "one weight each" in capsys.readouterr().err
    assert cli(["cache", "build", str(tiny_llama_dir), str(tiny_llama_dir), "pydoc", "-o", str(tmp_path / "e"),
                "--teacher-weights", "1", *SMALL]) == 2
    assert "one weight per teacher (2)" in capsys.readouterr().err


@pytest.fixture(scope="module")
def hidden_cache(tiny_llama_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("hidden") / "cache"
    assert cli(["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(out), "--hidden-layers", "0,2", *SMALL]) == 0
    return out


def test_hidden_states_are_the_teacher_layer_outputs(tiny_llama_dir, hidden_cache, tmp_path):
    manifest = read_manifest(hidden_cache)
    assert manifest.extras["hidden"] == {"layers": [0, 2], "dim": 32, "projection": "identity", "seed": 0}
    assert verify_cache(hidden_cache).ok
    cache = TopKCache(hidden_cache)
    assert (cache.hidden_layers, cache.hidden_dim) == ([0, 2], 32)
    teacher = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
    item = cache[1]
    states = teacher(input_ids=item["input_ids"][None], position_ids=item["position_ids"][None],
                     output_hidden_states=True).hidden_states
    trained = item["labels"] != -100
    got = item["teacher_hidden"]
    assert got.dtype == torch.float16 and got.shape == (32, 2, 32)
    for slot, layer in enumerate((0, 2)):
        assert torch.allclose(got[trained, slot].float(), states[layer + 1][0][trained], atol=2e-3, rtol=1e-3)
    assert not got[~trained].any()
    summary = inspect_cache(hidden_cache)
    assert summary["hidden_bytes_per_token"] == pytest.approx(2 * 32 * 2 * trained.float().mean().item(), rel=0.1)
    # A projected cache: D = 8 through the seeded orthogonal projection.
    small = tmp_path / "small"
    assert cli(["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(small), "--hidden-layers", "2",
                "--hidden-dim", "8", *SMALL]) == 0
    assert TopKCache(small)[1]["teacher_hidden"].shape == (32, 1, 8)
    assert read_manifest(small).extras["hidden"]["projection"] == "orthogonal"


def test_online_and_offline_hidden_terms_agree_with_the_identity_projection(tiny_llama_dir, hidden_cache, tmp_path):
    from destila.student import StudentInitSpec, init_student
    from destila.training import DistillationArguments
    from destila.data import collate
    from destila.training.hidden_distillation import HiddenDistillation
    from destila.training.trainer import DistillationTrainer

    init_student(StudentInitSpec(str(tiny_llama_dir), tmp_path / "student", layers=2))
    student = AutoModelForCausalLM.from_pretrained(tmp_path / "student")
    teacher = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
    args = DistillationArguments(output_dir=str(tmp_path / "o"), hidden_loss="mse", layer_map="s0:t0,s1:t2",
                                 online_loss="topk", top_k=8, report_to="none")
    cache = TopKCache(hidden_cache)
    offline_batch = collate([cache[i] for i in range(3)])
    offline = DistillationTrainer(model=student, args=args, data_collator=collate, cache=cache)
    online = DistillationTrainer(model=student, args=args, data_collator=collate, teacher_model=teacher)
    assert isinstance(offline.hidden, HiddenDistillation) and isinstance(online.hidden, HiddenDistillation)
    online_batch = {k: offline_batch[k] for k in ("input_ids", "labels")}
    loss_off, stats_off = offline._distill(student, offline_batch)
    loss_on, stats_on = online._distill(student, online_batch)
    assert stats_off["hidden"] > 0
    # Equal up to the float16 storage of the teacher states (and of nothing else: log-probs are float32 here).
    assert torch.allclose(stats_off["hidden"], stats_on["hidden"], rtol=2e-3)
    assert torch.allclose(loss_off, loss_on, rtol=2e-3)


def test_documented_commands(tiny_llama_dir, second_teacher, tmp_path, monkeypatch, capsys):
    """docs/techniques.md's mixture and offline hidden-state commands, with tiny models and sizes."""
    from destila.student import StudentInitSpec, init_student

    monkeypatch.chdir(tmp_path)
    init_student(StudentInitSpec(str(tiny_llama_dir), tmp_path / "student", layers=2))
    sizes = "--seq-len 32 --max-tokens 512 --top-k 8"
    for command in (
        f"destila cache build {tiny_llama_dir} {second_teacher} pydoc -o cache-mixture {sizes} --teacher-weights 0.7,0.3",
        "destila train student/ --cache cache-mixture -o mixture-out --max_steps 2",
        f"destila cache build {tiny_llama_dir} pydoc -o cache-hidden {sizes} --hidden-layers 0,3 --hidden-dim 16",
        "destila cache inspect cache-hidden",
        "destila train student/ --cache cache-hidden -o hidden-offline --hidden_loss mse --max_steps 2 --logging_steps 1",
    ):
        assert cli(command.split()[1:]) == 0, command
    assert "hidden states  layers [0, 3] at D = 16" in capsys.readouterr().out
    log = [json.loads(line) for line in (tmp_path / "hidden-offline" / "log.jsonl").read_text().splitlines()]
    assert any("hidden_loss" in record for record in log)


def test_verify_names_non_finite_hidden_states(hidden_cache, tmp_path):
    """A shard rewritten with a NaN in teacher_hidden (and its manifest entry updated, so only the values
    are wrong): verify names the fault."""
    import hashlib
    import shutil

    from safetensors.torch import load_file, save_file

    from destila.cache.format import write_manifest

    copy = tmp_path / "copy"
    shutil.copytree(hidden_cache, copy)
    manifest = read_manifest(copy)
    shard = manifest.shards[0]
    tensors = load_file(str(copy / shard.name))
    tensors["teacher_hidden"][0, 0, 0] = float("nan")
    save_file(tensors, str(copy / shard.name), metadata=shard_metadata_of(copy / shard.name))
    payload = (copy / shard.name).read_bytes()
    shard.sha256, shard.bytes = hashlib.sha256(payload).hexdigest(), len(payload)
    write_manifest(copy, manifest)
    report = verify_cache(copy)
    assert not report.ok and any("non-finite stored teacher hidden-state values" in f for f in report.faults)


def test_trainer_builds_the_hidden_term_from_its_args(tiny_llama_dir, hidden_cache, tmp_path):
    """DistillationTrainer(cache=...) with --hidden_loss in its args: the term is built, never ignored."""
    from destila.student import StudentInitSpec, init_student
    from destila.training import DistillationArguments
    from destila.training.trainer import DistillationTrainer

    init_student(StudentInitSpec(str(tiny_llama_dir), tmp_path / "student", layers=2))
    student = AutoModelForCausalLM.from_pretrained(tmp_path / "student")
    args = DistillationArguments(output_dir=str(tmp_path / "o"), hidden_loss="cosine", report_to="none")
    trainer = DistillationTrainer(model=student, args=args, cache=TopKCache(hidden_cache))
    assert trainer.hidden is not None and trainer.hidden.pairs == [(0, 0), (1, 2)]
    plain = tmp_path / "plain"
    assert cli(["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(plain), *SMALL]) == 0
    with pytest.raises(ValueError, match="hold no teacher hidden states"):
        DistillationTrainer(model=student, args=args, cache=TopKCache(plain))
