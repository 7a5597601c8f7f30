"""Rough edges a newcomer hit on a fresh clone (issue 43), each pinned: a reader that cannot load
the draft as published says so as a warning (DF148) with the normalize line, and the serve line it
loses is named; ..."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT

TINY = ROOT / "fixtures" / "tiny-pair"
TOP = TINY / "draft-top-level"
NORMALIZE = f"dflash-ckpt normalize {TOP} OUT"


def test_a_reader_that_needs_normalize_is_a_warning_ci_sees(cli) -> None:
    plain = cli("inspect", str(TOP), "-q")
    assert plain.code == 0 and plain.stdout == ""  # -q prints errors only; the warning is not one
    strict = cli("inspect", str(TOP), "-q", "--strict")
    assert strict.code == 1
    (line,) = strict.stdout.strip().splitlines()
    assert line.startswith(f"{TOP}/config.json: DF148 warning: lmdeploy 0.18 cannot load it as published (reads "
                           "block_size only from dflash_config"), line
    assert f"`{NORMALIZE}` writes a config it loads" in line
    github = cli("inspect", str(TOP), "--output-format", "github")
    assert github.code == 0 and "::warning file=" in github.stdout and "title=DF148::" in github.stdout
    doc = json.loads(cli("inspect", str(TOP), "--json").stdout)["results"][0]
    assert [f["code"] for f in doc["findings"] if f["severity"] == "warning"] == ["DF148"]
    normal = cli("inspect", str(TINY / "draft"), "--strict", "-q")  # every reader loads it: nothing to say
    assert normal.code == 0 and normal.stdout == ""


def test_the_serve_line_a_failing_reader_loses_is_named(cli) -> None:
    res = cli("inspect", str(TOP), "--target", str(TINY / "target"))
    assert res.code == 0
    serve = res.stdout.split("serve it with", 1)[1]
    assert "  vllm: vllm serve" in serve
    lines = [line for line in serve.splitlines() if line.startswith("  lmdeploy: ")]
    assert lines == [f"  lmdeploy: no line: lmdeploy 0.18 reads block_size only from dflash_config, where it is absent "
                     f"(it is only in the top level); serve the copy `{NORMALIZE}` writes"], serve
    doc = json.loads(cli("inspect", str(TOP), "--target", str(TINY / "target"), "--json").stdout)["results"][0]
    assert "lmdeploy" not in doc["serve"] and "vllm" in doc["serve"]


def test_rule_df148_is_explained(cli) -> None:
    res = cli("rules", "DF148")
    assert res.code == 0 and "normalize" in res.stdout and "lmdeploy" in res.stdout


def _draft_with_mask(tmp_path, mask: int):
    """The tiny draft with another mask_token_id (its weights linked, not copied)."""
    out = tmp_path / f"mask-{mask}"
    out.mkdir()
    for f in (TINY / "draft").iterdir():
        if f.name == "config.json":
            config = json.loads(f.read_text())
            config["dflash_config"]["mask_token_id"] = mask
            (out / f.name).write_text(json.dumps(config, indent=2))
        else:
            (out / f.name).symlink_to(f)
    return out


def test_an_ordinary_token_as_mask_is_a_finding_naming_the_dedicated_id(cli, tmp_path) -> None:
    draft = _draft_with_mask(tmp_path, 100)
    doc = json.loads(cli("inspect", str(draft), "--target", str(TINY / "target"), "--json").stdout)["results"][0]
    [f] = [f for f in doc["findings"] if f["code"] == "DF320"]
    assert f["severity"] == "warning" and f["key"] == "mask_token_id"
    assert "mask_token_id 100 is an ordinary token of the target's tokenizer" in f["message"]
    assert "first added token 720" in f["message"] and "dedicated mask id" in f["message"]
    # the tiny pair's own mask (725) is past the tokenizer's tokens, as Qwen3's 151669 is: no finding
    clean = json.loads(cli("inspect", str(TINY / "draft"), "--target", str(TINY / "target"), "--json").stdout)["results"][0]
    assert "DF320" not in {f["code"] for f in clean["findings"]}
    # an added token that is eos is DF310's (once), not DF320's
    eos = json.loads(cli("inspect", str(_draft_with_mask(tmp_path, 722)), "--target", str(TINY / "target"),
                         "--json").stdout)["results"][0]
    codes = [f["code"] for f in eos["findings"]]
    assert "DF310" in codes and "DF320" not in codes


def test_df310_names_the_familys_dedicated_mask_id() -> None:
    from dflash_ckpt.checks.pitfalls import check_target_pitfalls
    from dflash_ckpt.draftspec.specs import target_from_config

    from dflash_ckpt.sources.resolve import open_source
    from dflash_ckpt.draftspec.specs import read_draft_spec

    spec = read_draft_spec(open_source(str(TINY / "draft"), role="draft"))
    qwen3 = target_from_config({"model_type": "qwen3", "num_hidden_layers": 8, "hidden_size": 128, "vocab_size": 768,
                                "eos_token_id": spec.mask_token_id}, label="t", where="t/config.json")
    [f] = [f for f in check_target_pitfalls(spec, qwen3) if f.code == "DF310"]
    assert "use the family's dedicated mask id (151669 for qwen3)" in f.message and f.key == "mask_token_id"


def test_an_out_of_vocab_mask_is_reported_once_with_its_line(cli, tmp_path) -> None:
    draft = _draft_with_mask(tmp_path, 768)  # vocab_size 768, draft and target alike
    res = cli("inspect", str(draft), "--target", str(TINY / "target"), "--output-format", "github")
    assert res.code == 1
    lines = [line for line in res.stdout.splitlines() if "mask_token_id" in line and line.startswith("::error")]
    assert len(lines) == 1 and "title=DF122" in lines[0] and ",line=" in lines[0], res.stdout
    small = json.loads((TINY / "target" / "config.json").read_text())  # a target vocab below the mask: DF304, keyed
    small["vocab_size"] = 700
    target = tmp_path / "small-target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(small))
    doc = json.loads(cli("inspect", str(_draft_with_mask(tmp_path, 710)), "--target", str(target), "--json").stdout)
    [f] = [f for f in doc["results"][0]["findings"] if f["code"] == "DF304"]
    assert f["key"] == "mask_token_id"


def test_rules_takes_a_prefix_as_select_does(cli) -> None:
    from dflash_ckpt.rules import RULES

    res = cli("rules", "DF3", "--json")
    assert res.code == 0
    codes = [r["code"] for r in json.loads(res.stdout)["results"]]
    assert codes == [c for c in RULES if c.startswith("DF3")] and len(codes) > 10
    text = cli("rules", "df31")
    assert text.code == 0 and "DF310" in text.stdout and "DF320" not in text.stdout and "DF301" not in text.stdout
    one = cli("rules", "DF310")  # a whole code still explains the one rule
    assert one.code == 0 and "Use the family's dedicated mask id" in one.stdout
    unknown = cli("rules", "DF9")
    assert unknown.code == 2 and "no rule code is or starts with it" in unknown.stderr


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version_flag(cli, flag: str) -> None:
    from dflash_ckpt import __version__

    res = cli(flag)
    assert res.code == 0 and res.stdout.strip() == f"dflash-ckpt {__version__}"


def test_severities_print_as_what_they_are() -> None:
    from dflash_ckpt.rules import Severity, finding

    assert str(Severity.ERROR) == "error" and f"{Severity.WARNING}" == "warning"
    assert "Severity." not in str(finding("DF310", "x", path="p").severity)


def test_results_print_as_what_they_are() -> None:
    import dflash_ckpt

    res = dflash_ckpt.inspect(TOP, target=TINY / "target")
    text = str(res)
    assert text.splitlines()[0] == "inspect: ok (exit 0), 2 finding(s)", text
    assert f"{TOP}/config.json: DF148 warning: " in text and " at 0x" not in repr(res)
    assert repr(res.results[0]) == f"InspectResult('{TOP}', ok, findings=['DF220', 'DF148'])"


@pytest.mark.slow
def test_the_readme_api_example_gets_a_verdict_and_says_when_there_is_none() -> None:
    """The README's smoke_run example runs the built-in prompts (a verdict); one short prompt says
    it has none (DF408) in its first printed line, rather than a bare tau from 11 steps."""
    import re

    import dflash_ckpt

    readme = (ROOT / "README.md").read_text()
    assert 'dflash_ckpt.smoke_run("fixtures/tiny-pair/draft", "fixtures/tiny-pair/target")  # built-in prompts: a verdict\nprint(smoke)' in readme
    smoke = dflash_ckpt.smoke_run(TINY / "draft", TINY / "target", device="cpu")
    assert re.match(r"smoke-run: ok \(exit 0\), pass, tau \d\.\d\d \(95% \d\.\d\d-\d\.\d\d\), outputs match on 3/3, "
                    r"0 finding\(s\)$", str(smoke)), str(smoke)
    short = dflash_ckpt.smoke_run(TINY / "draft", TINY / "target", prompt="hi", max_new_tokens=16, device="cpu")
    first = str(short).splitlines()[0]
    assert "no verdict (DF408: too little evidence)" in first and "DF408 warning" in str(short)


@pytest.mark.slow
def test_suite_table_and_verdict_count_the_same_matches(cli) -> None:
    """chat-14 ties at its first token on the tiny pair (DF402) on the kernel paths (oneDNN's packed
    bf16, the AVX2 kernel): the overall row and the verdict both count it as a match and name it,
    where they read 15/16 and 16/16. torch's own bf16 path rounds that logit the other way and
    matches it outright: then both say 16/16 and neither names a tie."""
    from dflash_ckpt.environment import cpu_facts

    res = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--suite", "chat", "-n", "8",
              "--device", "cpu", "--min-acceptance", "0")
    assert res.code == 0, res.stderr
    overall = next(line for line in res.stdout.splitlines() if line.strip().startswith("overall "))
    verdict = next(line for line in res.stdout.splitlines() if line.startswith(("PASS", "FAIL", "NO VERDICT")))
    import re

    counted = re.search(r"(\d+)/16 (?:match \((\d+) ties?\)|same)$", overall.rstrip())
    assert counted, overall
    if cpu_facts()["bf16_linear_path"] == "torch":
        assert counted.group(2) is None and "tie" not in verdict, (overall, verdict)
        assert f"outputs match on {counted.group(1)}/16 prompt(s)," in verdict, verdict
    else:
        assert counted.group(2) and int(counted.group(2)) >= 1, overall
        assert f"outputs match on {counted.group(1)}/16 prompt(s) ({counted.group(2)} tie" in verdict, verdict


@pytest.mark.slow
def test_suite_all_leaves_out_what_does_not_fit_the_target_and_says_so(cli) -> None:
    """long-09 (1166 tokens) cannot fit the tiny target's 1024 positions: --suite all runs the other
    prompts and names it (DF433), where it exited 2 asking to shorten a built-in prompt."""
    res = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "--suite", "long", "-n", "4",
              "--device", "cpu", "--min-acceptance", "0", "--json")
    assert res.code == 0, res.stderr
    doc = json.loads(res.stdout)["results"][0]
    [f] = [f for f in doc["findings"] if f["code"] == "DF433"]
    assert f["severity"] == "warning" and "long-09" in f["message"] and f["key"] == "max_position_embeddings"
    names = [p["name"] for p in doc["prompts"]]
    assert "long-09" not in names and len(names) >= 10
    # a prompt of the user's own that does not fit is still refused, naming the -n that fits
    own = cli("smoke-run", str(TINY / "draft"), "--target", str(TINY / "target"), "-p", "word " * 1100, "-n", "4",
              "--device", "cpu")
    assert own.code == 2 and "max_position_embeddings 1024" in own.stderr


@pytest.mark.slow
def test_quiet_silences_the_hubs_retry_lines(hub, home) -> None:
    """-q is errors only: a Hub that fails twice and then answers leaves stderr empty with -q, and
    says each retry without it."""
    from conftest import run_cli
    from hub_server import hub_env

    for flags, says in ((("-q",), False), ((), True)):
        hub.reset()
        hub.fail(r"^/api/models/tiny/draft", status=503, times=2)
        res = run_cli("inspect", "tiny/draft", *flags, env=hub_env(hub, home), timeout=120)
        assert res.code == 0, res.stderr
        assert ("retry 1/3" in res.stderr and "retry 2/3" in res.stderr) is says, res.stderr
        if not says:
            assert res.stderr == "" and res.stdout == ""


def test_make_fixtures_says_sparse_files_take_no_disk(fixtures_root) -> None:
    import re

    import make_fixtures

    line = make_fixtures.size_line(fixtures_root)
    m = re.fullmatch(r"fixtures in \S+: ([\d.]+) MiB on disk; the weight files are sparse \(real headers, data that "
                     r"is holes, read as zeros and taking no disk\), ([\d.]+) GiB apparent size", line)
    assert m and float(m.group(1)) < 100 and float(m.group(2)) > 10, line


@pytest.mark.slow
def test_env_prints_what_a_bug_report_needs(cli) -> None:
    from dflash_ckpt import __version__

    res = cli("env")
    assert res.code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["dflash-ckpt", "python", "libraries", "cpu", "torch", "vllm",
                                                       "other engines"], res.stdout
    assert lines[0].startswith(f"dflash-ckpt: {__version__}, commit ") and "unknown" not in lines[0]  # a git checkout
    assert "torch 2." in lines[2] and "bf16 linear path: " in lines[3]
    assert lines[4].startswith("torch: 2.") and "GPU: " in lines[4]


def test_env_names_the_cpu_path_the_run_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    from dflash_ckpt.environment import cpu_facts

    cpu = cpu_facts()
    if not cpu["avx2"]:
        pytest.skip("no AVX2 here")
    monkeypatch.delenv("DFLASH_CKPT_NO_KERNEL", raising=False)  # a run on torch's forced path sets it
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # the tests' way to force the AVX2 kernel's path
    assert cpu_facts()["bf16_linear_path"] == "avx2-kernel"
    monkeypatch.setenv("DFLASH_CKPT_NO_KERNEL", "1")
    assert cpu_facts()["bf16_linear_path"] == "torch"


@pytest.mark.slow
def test_env_imports_no_torch_until_asked() -> None:
    import subprocess
    import sys

    code = ("import sys; from dflash_ckpt.environment import collect; f = collect(torch=False, engines=False); "
            "assert 'torch' not in sys.modules and f['torch'] is None; print(f['tool']['version'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
