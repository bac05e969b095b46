"""training/recipe.py: each shipped checkpoint's recipe.toml, its replay and its dry run.

The toy model's recipe is replayed from nothing (one CPU thread, fixed seeds, ten epochs) and must give the shipped
weights back; the runner must run exactly the command its dry run prints; every recipe must parse, each training
step into a ``TrainConfig``, and unknown keys must be refused by name."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from training import recipe as recipes
from training.config import TrainConfig
from training.recipe import Recipe
from training.train import parse_args

ROOT = Path(__file__).resolve().parent.parent
REVERSE = ROOT / "pretrained" / "reverse"
RECIPES = sorted(ROOT.glob("pretrained/*/recipe.toml"))
PLACE = ("out", "data_root", "init_from", "quiet", "device", "data")  # where a run read and wrote: not what it trained


@pytest.mark.slow
def test_the_reverse_recipe_replayed_from_nothing_gives_the_shipped_weights(tmp_path):
    """Every tensor of the replay equals pretrained/reverse/model.safetensors (float16 as shipped) to 1e-6."""
    out = recipes.main([str(REVERSE), "--out", str(tmp_path)])
    replayed, shipped = load_file(str(out / "model.safetensors")), load_file(str(REVERSE / "model.safetensors"))
    assert replayed.keys() == shipped.keys()
    worst = {k: (replayed[k].float() - shipped[k].float()).abs().max().item() for k in shipped}
    assert all(replayed[k].shape == shipped[k].shape for k in shipped)
    assert max(worst.values()) <= 1e-6, sorted(worst.items(), key=lambda kv: -kv[1])[:5]
    assert json.loads((out / "config.json").read_text()) == json.loads((REVERSE / "config.json").read_text())
    assert (out / "vocab.json").read_text() == (REVERSE / "vocab.json").read_text()


def test_the_dry_run_prints_the_training_command_and_runs_nothing(tmp_path, capsys):
    """One line for the one step: ``python -m training.train`` with flags that parse back into the recipe's config."""
    assert recipes.main([str(REVERSE), "--out", str(tmp_path / "replay"), "--dry-run"]) is None
    env_line, *lines = capsys.readouterr().out.strip().splitlines()
    assert env_line.split()[0] == "export" and dict(kv.split("=") for kv in env_line.split()[1:]) == recipes.REPRODUCIBLE_ENV
    assert len(lines) == 1 and lines[0].startswith("python -m training.train --task reverse ")
    config = parse_args(shlex.split(lines[0])[3:])
    [step] = Recipe.from_toml(REVERSE).steps
    assert config == recipes.train_config(step, str(tmp_path / "replay"), "unused")
    assert config.out == str(tmp_path / "replay" / "reverse") and config.epochs == 10 and config.threads == 1
    assert not config.bf16 and config.d_model == 64 and config.seed == 1234
    assert not (tmp_path / "replay").exists()


@pytest.mark.slow
def test_the_runner_trains_exactly_what_the_command_trains(tmp_path, capsys):
    """A two-step recipe (a tiny reverse run, then a second stage from it): the replay's weights are byte for byte
    those of the dry run's own lines (its environment, then its commands) run by a shell."""
    (tmp_path / "recipe.toml").write_text(
        'checkpoint = "tiny"\nresult = "second"\n'
        '[[step]]\nname = "first"\nkind = "train"\n'
        "[step.config]\ntask = 'reverse'\ntrain_size = 300\nd_model = 16\nn_heads = 2\nd_ff = 32\nn_enc_layers = 1\n"
        "n_dec_layers = 1\nepochs = 1\nmax_tokens = 512\nbf16 = false\nthreads = 1\nval_limit = 10\n"
        '[[step]]\nname = "second"\nkind = "train"\n'
        "[step.config]\ntask = 'reverse'\ntrain_size = 200\nseed = 5\nepochs = 1\nmax_tokens = 512\nbf16 = false\n"
        'threads = 1\nval_limit = 10\ninit_from = "{out}/first"\nkeep_vocab = true\nlr = 1e-4\n'
    )
    replayed = recipes.main([str(tmp_path / "recipe.toml"), "--out", str(tmp_path / "a")])
    lines = recipes.commands(Recipe.from_toml(tmp_path / "recipe.toml"), str(tmp_path / "b"), "unused")
    assert [line[:3] for line in lines] == [["python", "-m", "training.train"]] * 2
    capsys.readouterr()  # what the replay printed
    recipes.main([str(tmp_path / "recipe.toml"), "--out", str(tmp_path / "b"), "--dry-run"])
    script = capsys.readouterr().out
    assert script.splitlines()[1:] == [shlex.join(line) for line in lines]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"  # `python`: this interpreter
    subprocess.run(["bash", "-euc", script], check=True, cwd=ROOT, env={**os.environ, "PATH": path})
    by_hand = load_file(str(tmp_path / "b" / "second" / "model.safetensors"))
    assert replayed == tmp_path / "a" / "second"
    assert all(torch.equal(t, by_hand[k]) for k, t in load_file(str(replayed / "model.safetensors")).items())


@pytest.mark.parametrize("path", RECIPES, ids=[p.parent.name for p in RECIPES])
def test_each_recipe_parses_and_every_training_step_is_a_train_config(path):
    recipe = Recipe.from_toml(path)
    assert recipe.checkpoint == f"pretrained/{path.parent.name}"
    names = [s.name for s in recipe.steps]
    assert recipe.result in names and len(set(names)) == len(names)
    for step in recipe.steps:
        assert step.ran_on, f"{step.name}: where it ran is recorded"
        if step.kind == "train":
            config = recipes.train_config(step, "OUT", "ROOT")
            assert isinstance(config, TrainConfig) and config.out == f"OUT/{step.name}"
            assert config.seed == step.config.get("seed", 1234)  # a seed is recorded or the default
        if step.kind == "average":
            assert len(step.members) >= 2 and all(m in names[: names.index(step.name)] for m in step.members)
    assert recipes.commands(recipe, "OUT", "ROOT")


@pytest.mark.parametrize("name", ["reverse", "en-de-captions"])
def test_a_one_run_recipe_trains_what_metrics_json_says_was_trained(name):
    """The recipe's run has every option metrics.json recorded for the shipped run (paths aside)."""
    folder = ROOT / "pretrained" / name
    recipe = Recipe.from_toml(folder)
    [step] = [s for s in recipe.steps if s.name == recipe.result]
    config = recipes.train_config(step, "OUT", "ROOT").to_dict()
    recorded = json.loads((folder / "metrics.json").read_text())["training"]["args"]
    differ = {k: (v, config[k]) for k, v in recorded.items() if k not in PLACE and config[k] != v}
    assert not differ


def test_the_en_de_recipe_ends_in_the_mean_of_stage_20_and_23f():
    """metrics.json: the shipped model is the mean of stage 20 and 23F; 23F's options are metrics.json's."""
    folder = ROOT / "pretrained" / "en-de"
    recipe = Recipe.from_toml(folder)
    steps = {s.name: s for s in recipe.steps}
    training = json.loads((folder / "metrics.json").read_text())["training"]
    assert steps[recipe.result].kind == "average" and steps[recipe.result].members == ("20", "23F")
    [member] = training["members"]
    config = recipes.train_config(steps["23F"], "OUT", "ROOT").to_dict()
    assert not {k: v for k, v in member["args"].items() if k not in PLACE and config[k] != v}
    assert steps["23F"].config["init_from"] == "{out}/22D"
    for earlier in training["earlier_members"]:  # every averaged run on the path has the options it was run with
        if earlier["stage"] in steps:
            config = recipes.train_config(steps[earlier["stage"]], "OUT", "ROOT").to_dict()
            assert not {k: v for k, v in earlier["args"].items() if k not in PLACE and config[k] != v}, earlier["stage"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('checkpoint = "x"\nresult = "a"\nresults = 1\n', "results"),
        ('checkpoint = "x"\nresult = "a"\n[[step]]\nname = "a"\nkind = "train"\nminute = 3\n', "minute"),
        (
            'checkpoint = "x"\nresult = "a"\n[[step]]\nname = "a"\nkind = "train"\n[step.config]\nlearning_rate = 1\n',
            "learning_rate",
        ),
        (
            'checkpoint = "x"\nresult = "a"\n[[step]]\nname = "a"\nkind = "train"\n[step.config.transforms.entities]\nq = 1\n',
            "transforms.entities.q",
        ),
        ('checkpoint = "x"\nresult = "a"\n[[step]]\nname = "a"\nkind = "train"\n[step.config.transforms.colour]\n', "colour"),
        ('checkpoint = "x"\nresult = "a"\n[[step]]\nname = "a"\nkind = "average"\nmembers = ["b", "c"]\n', "'b'"),
        ('checkpoint = "x"\nresult = "b"\n[[step]]\nname = "a"\nkind = "train"\n', "result 'b'"),
        ('checkpoint = "x"\nresult = "a"\n[[step]]\nname = "a"\nkind = "bake"\n', "bake"),
    ],
)
def test_a_recipe_with_an_unknown_key_or_step_is_refused_by_name(tmp_path, text, named):
    (tmp_path / "recipe.toml").write_text(text)
    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        Recipe.from_toml(tmp_path)
