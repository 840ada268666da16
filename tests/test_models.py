import pytest
import torch

from destila.models import check_plain_head, decoder_of, load_causal_lm, load_tokenizer, output_head


def test_loads_saved_folder_and_head_matches_logits(tiny_model_dir):
    model = load_causal_lm(str(tiny_model_dir))
    tokenizer = load_tokenizer(str(tiny_model_dir))
    ids = torch.tensor([tokenizer("def f(x): return x").input_ids])
    weight, bias = output_head(model)
    check_plain_head(model)
    with torch.no_grad():
        hidden = decoder_of(model)(ids).last_hidden_state
        expected = model(ids).logits
    logits = hidden @ weight.T + (bias if bias is not None else 0)
    torch.testing.assert_close(logits, expected)


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_causal_lm(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_causal_lm(str(tmp_path / "nope"))


def test_check_source_refuses_what_loading_would_without_converting_or_probing(tmp_path, monkeypatch):
    """The up-front check: the same refusals of a local path, and none of resolve_source's slow work (the embedded
    teacher's first conversion, the hub probe)."""
    import destila.models.loading as loading
    from destila.models import check_source

    monkeypatch.setenv("DESTILA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(loading, "hub_unreachable", lambda: pytest.fail("the hub was probed"))
    check_source("smollm2")
    check_source("some-org/some-model")
    assert not (tmp_path / "home").exists()  # nothing converted
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        check_source(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        check_source(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="expected a folder, a .gguf file or a hub id"):
        check_source(str(tmp_path / "weights.bin"))


def test_unreachable_hub_id_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(FileNotFoundError, match="Hugging Face Hub could not provide it"):
        load_causal_lm("some-org/no-such-model")


def test_soft_capped_head_is_refused(tiny_llama_dir):
    model = load_causal_lm(str(tiny_llama_dir))
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        check_plain_head(model)


def test_final_hidden_states_through_forward_match_the_decoder(tiny_model_dir):
    from destila.models import final_hidden_states

    model = load_causal_lm(str(tiny_model_dir))
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    hidden = final_hidden_states(model, ids)
    with torch.no_grad():
        expected = decoder_of(model)(ids).last_hidden_state
    torch.testing.assert_close(hidden.detach(), expected)
    assert hidden.requires_grad  # part of the graph: the loss can train the decoder
