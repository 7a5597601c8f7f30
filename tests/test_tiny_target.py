"""The committed tiny target (fixtures/tiny-pair/target/) is a Hugging Face Qwen3 checkpoint that
loads, and it is trained: it answers requests in the corpus's forms (memorised replies exactly;
computed ones with the right structure, the tiny model's arithmetic being unreliable).

Nothing here retrains; the checks read the committed files. Expected shapes come from the
config through the rules of a dense Qwen3 written out below, not from the training code.
"""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import header as safetensors_header

ROOT = Path(__file__).resolve().parents[1]
PAIR = ROOT / "fixtures" / "tiny-pair"
TARGET = PAIR / "target"
RECORD = PAIR / "target-training.json"
HF_FILES = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "generation_config.json"}


def load_json(name: str) -> Any:
    return json.loads((TARGET / name).read_text())


def expected_shapes(cfg: dict[str, Any]) -> dict[str, list[int]]:
    """Every tensor of a dense Qwen3 checkpoint and its shape, from the config alone."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    hd = cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": [cfg["vocab_size"], h], "model.norm.weight": [h]}
    if not cfg["tie_word_embeddings"]:
        out["lm_head.weight"] = [cfg["vocab_size"], h]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [q, h], p + "self_attn.k_proj.weight": [kv, h],
            p + "self_attn.v_proj.weight": [kv, h], p + "self_attn.o_proj.weight": [h, q],
            p + "self_attn.q_norm.weight": [hd], p + "self_attn.k_norm.weight": [hd],
            p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
        }
    return out


@pytest.fixture(scope="module")
def tokenizer():
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_file(str(TARGET / "tokenizer.json"))


def test_folder_holds_the_hugging_face_files_and_nothing_else():
    assert {p.name for p in TARGET.iterdir()} == HF_FILES


def test_config_is_a_small_dense_qwen3():
    cfg = load_json("config.json")
    assert cfg["model_type"] == "qwen3"
    assert cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert 64 <= cfg["hidden_size"] <= 128
    assert 2 <= cfg["num_hidden_layers"] <= 12
    assert cfg["num_attention_heads"] % cfg["num_key_value_heads"] == 0
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"], "GQA: fewer key/value heads than query heads"
    assert cfg["layer_types"] == ["full_attention"] * cfg["num_hidden_layers"]
    assert cfg["use_sliding_window"] is False and cfg["attention_bias"] is False


def test_weights_are_exactly_the_qwen3_tensors_in_bf16():
    cfg = load_json("config.json")
    header = safetensors_header(TARGET / "model.safetensors")
    assert {k: v["shape"] for k, v in header.items()} == expected_shapes(cfg)
    assert {v["dtype"] for v in header.values()} == {"BF16"}
    assert cfg["dtype"] == "bfloat16"
    assert (TARGET / "model.safetensors").stat().st_size < 4 * 1024 * 1024


def test_the_tool_reads_it_as_a_target():
    from dflash_ckpt.draftspec.specs import target_from_config

    cfg = load_json("config.json")
    spec = target_from_config(cfg, label="tiny", where=str(TARGET / "config.json"))
    assert (spec.model_type, spec.num_hidden_layers, spec.hidden_size, spec.vocab_size) == (
        "qwen3", cfg["num_hidden_layers"], cfg["hidden_size"], cfg["vocab_size"])


def test_tokenizer_has_chatml_tokens_and_spare_embedding_rows(tokenizer):
    cfg = load_json("config.json")
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    assert size < cfg["vocab_size"], "the embedding table must have rows past the tokenizer (the mask row)"
    ids = {t: tokenizer.token_to_id(t) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>")}
    assert None not in ids.values()
    # Qwen-like: the control tokens come after the learned vocabulary, the last of them ends it.
    assert sorted(ids.values()) == list(range(size - 5, size))
    text = "<|im_start|>user\nWhat is 12 + 30?<|im_end|>\n"
    enc = tokenizer.encode(text)
    assert enc.ids[0] == ids["<|im_start|>"] and ids["<|im_end|>"] in enc.ids
    assert tokenizer.decode(enc.ids, skip_special_tokens=False) == text
    assert [tokenizer.id_to_token(i) for i in tokenizer.encode("2026").ids] == ["2", "0", "2", "6"], "digits split"
    # the mask row lies past every id encoding can produce
    assert max(tokenizer.encode("any text at all, même accentué: ünïcödé 🙂").ids) < size


def test_tokenizer_config_agrees_with_tokenizer_and_configs(tokenizer):
    tc = load_json("tokenizer_config.json")
    cfg = load_json("config.json")
    gen = load_json("generation_config.json")
    for sid, entry in tc["added_tokens_decoder"].items():
        assert tokenizer.token_to_id(entry["content"]) == int(sid)
    im_end, eot = tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")
    assert tc["eos_token"] == "<|im_end|>" and tc["pad_token"] == "<|endoftext|>"
    assert cfg["eos_token_id"] == im_end
    assert gen["eos_token_id"] == [im_end, eot] and gen["pad_token_id"] == eot
    assert gen["do_sample"] is False


def render(template: str, messages: list[dict[str, str]], **kw: Any) -> str:
    """As transformers renders a chat template: sandboxed Jinja, trim_blocks and lstrip_blocks."""
    jinja2_sandbox = pytest.importorskip("jinja2.sandbox")
    env = jinja2_sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=messages, **kw)


def test_chat_template_renders_chatml_with_the_thinking_switch():
    template = load_json("tokenizer_config.json")["chat_template"]
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count from 1 to 3."}]
    base = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nCount from 1 to 3.<|im_end|>\n"
    assert render(template, msgs, add_generation_prompt=True, enable_thinking=False) == (
        base + "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert render(template, msgs, add_generation_prompt=True) == base + "<|im_start|>assistant\n"
    assert render(template, msgs, add_generation_prompt=True, enable_thinking=True) == base + "<|im_start|>assistant\n"
    assert render(template, msgs, add_generation_prompt=False) == base
    history = msgs + [{"role": "assistant", "content": "<think>\ncounting\n</think>\n\n1, 2, 3."}]
    assert render(template, history).endswith("<|im_start|>assistant\n1, 2, 3.<|im_end|>\n"), "reasoning dropped"


def test_training_record_reports_the_curve_and_predictability(tokenizer):
    rec = json.loads(RECORD.read_text())
    curve = rec["curve"]
    assert curve[-1]["step"] == rec["recipe"]["steps"]
    assert curve[-1]["heldout_loss"] < curve[0]["heldout_loss"] / 2, "the loss fell"
    assert rec["token_ids"]["mask"] == tokenizer.get_vocab_size(with_added_tokens=True)
    assert rec["token_ids"]["mask"] < load_json("config.json")["vocab_size"]
    pred = rec["predictability"]
    assert pred["requests"] >= 100 and pred["greedy_tokens"] > 1000


# -- behaviour of the saved weights ----------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tokenizer):
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "fixtures"))
    from tiny_pair_src.hf_layout import load_target

    return load_target(TARGET)


def greedy_reply(model: Any, tokenizer: Any, user: str) -> str:
    from tiny_pair_src.qwen3 import greedy_generate

    template = load_json("tokenizer_config.json")["chat_template"]
    prompt = render(template, [{"role": "user", "content": user}], add_generation_prompt=True, enable_thinking=False)
    stop = {tokenizer.token_to_id("<|im_end|>"), tokenizer.token_to_id("<|endoftext|>")}
    out = greedy_generate(model, [tokenizer.encode(prompt).ids], 160, stop, tokenizer.token_to_id("<|endoftext|>"))
    return tokenizer.decode(out[0], skip_special_tokens=False)


@pytest.mark.slow
def test_saved_target_answers_memorised_requests_exactly(trained, tokenizer):
    from tiny_pair_src.corpus import FACTS

    reply = greedy_reply(trained, tokenizer, "Write the multiplication table of 7.")
    assert reply == "Here is the multiplication table of 7:\n" + "\n".join(
        f"7 x {i} = {7 * i}" for i in range(1, 11)) + "<|im_end|>"
    assert greedy_reply(trained, tokenizer, "Tell me about the moon.") == FACTS["the moon"] + "<|im_end|>"
    reply = greedy_reply(trained, tokenizer, "Write a Python function that reverses a string.")
    assert reply.startswith("Here is a Python function that reverses a string:\n\n```python\n"
                            "def reverse_string(s):\n    return s[::-1]\n```")
    assert reply.endswith("<|im_end|>")


@pytest.mark.slow
def test_saved_target_counts_from_where_it_is_told(trained, tokenizer):
    rng = random.Random(7)
    for _ in range(3):
        s = rng.randint(3, 60)
        reply = greedy_reply(trained, tokenizer, f"Count from {s} to {s + 12}.")
        assert reply.startswith(f"Counting from {s} to {s + 12}: " + ", ".join(str(i) for i in range(s, s + 13)))


@pytest.mark.slow
def test_saved_target_sums_step_by_step_with_the_operands_it_was_given(trained, tokenizer):
    """The step-by-step form, the operands copied from the prompt, one result stated twice:
    predictable structure (the tiny model's carries are not always right)."""
    rng = random.Random(11)
    pairs = [(rng.randint(10, 99), rng.randint(10, 99)) for _ in range(10)]
    shaped = 0
    for a, b in pairs:
        reply = greedy_reply(trained, tokenizer, f"What is {a} + {b}?")
        m = re.fullmatch(
            rf"Add the ones: {a % 10} \+ {b % 10} = \d+\.( Write \d and carry 1\.)? Add the tens: "
            rf"{a // 10} \+ {b // 10}( \+ 1)? = \d+\. So {a} \+ {b} = (\d+)\. The answer is (\d+)\.<\|im_end\|>", reply)
        shaped += bool(m and m.group(3) == m.group(4))
    assert shaped >= 8, f"only {shaped} of 10 replies have the corpus's form"


def test_thinking_mode_opens_a_reasoning_block(trained, tokenizer):
    from tiny_pair_src.qwen3 import greedy_generate

    template = load_json("tokenizer_config.json")["chat_template"]
    prompt = render(template, [{"role": "user", "content": "Tell me about the sun."}], add_generation_prompt=True)
    stop = {tokenizer.token_to_id("<|im_end|>")}
    out = greedy_generate(trained, [tokenizer.encode(prompt).ids], 120, stop, tokenizer.token_to_id("<|endoftext|>"))
    reply = tokenizer.decode(out[0], skip_special_tokens=False)
    assert re.match(r"<think>\n\S.*\n</think>\n\nThe sun is", reply), reply


def test_corpus_prompts_tokenize_alone_as_inside_the_conversation(tokenizer):
    """Training joins a prompt's ids and its reply's ids; an engine encodes the prompt alone. The
    two agree only if no token spans the boundary, which the tokenizer's split rules ensure."""
    sys.path.insert(0, str(ROOT / "fixtures"))
    from tiny_pair_src.corpus import chat_prompt, completion, heldout_exchanges

    for ex in heldout_exchanges(seed=5, per_family=6):
        for thinking in (False, True):
            prompt = chat_prompt([{"role": "user", "content": ex.user}], thinking)
            reply = completion(ex, thinking)
            assert tokenizer.encode(prompt + reply).ids == tokenizer.encode(prompt).ids + tokenizer.encode(reply).ids


def test_corpus_renders_prompts_with_the_saved_template():
    sys.path.insert(0, str(ROOT / "fixtures"))
    from tiny_pair_src.corpus import chat_prompt

    template = load_json("tokenizer_config.json")["chat_template"]
    msgs = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "Hi!"}]
    assert chat_prompt(msgs, thinking=False) == render(template, msgs, add_generation_prompt=True, enable_thinking=False)
    assert chat_prompt(msgs, thinking=True) == render(template, msgs, add_generation_prompt=True)
