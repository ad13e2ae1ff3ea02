"""Search spaces: every domain draws inside its bounds, grids cross, bad input is named."""

from __future__ import annotations

import math
import os
import random
from collections import Counter

import pytest

from muster import tune
from muster.exceptions import InvalidArgumentError
from muster.tune.search import BasicVariantGenerator, ConcurrencyLimiter
from muster.tune.search.variant_generator import FINISHED, grid_points, resolve


def _draws(domain, n=400, seed=0):
    rng = random.Random(seed)
    return [domain.sample(random_state=rng) for _ in range(n)]


def test_uniform_and_loguniform_stay_in_bounds_and_spread():
    u = _draws(tune.uniform(2.0, 3.0))
    assert all(2.0 <= v <= 3.0 for v in u) and min(u) < 2.1 and max(u) > 2.9
    lu = _draws(tune.loguniform(1e-5, 1e-1))
    assert all(1e-5 <= v <= 1e-1 for v in lu)
    # log-uniform: about a quarter of draws per decade
    assert 0.15 < sum(v < 1e-4 for v in lu) / len(lu) < 0.35


def test_quantized_domains_give_multiples_inside_bounds():
    for v in _draws(tune.quniform(0.0, 1.0, 0.25)):
        assert v in (0.0, 0.25, 0.5, 0.75, 1.0)
    for v in _draws(tune.qloguniform(1e-3, 1.0, 1e-3)):
        assert 1e-3 <= v <= 1.0 and math.isclose(round(v / 1e-3) * 1e-3, v, abs_tol=1e-9)
    assert set(_draws(tune.qrandint(0, 10, 5))) == {0, 5, 10}  # upper included
    logq = _draws(tune.qlograndint(1, 1000, 5))
    assert all(isinstance(v, int) and v % 5 == 0 and 5 <= v <= 1000 for v in logq)
    assert sum(v <= 100 for v in logq) > len(logq) / 2  # log scale: most draws in the lower decades


def test_each_multiple_of_a_quantized_integer_domain_is_as_likely_as_the_next():
    """As Ray draws them, by their index: rounding a drawn integer to a multiple gave the end multiples half the
    weight of the inner ones (qrandint(0, 10, 5): 0 and 10 at .27, 5 at .45) and log-scale draws a zig-zag."""
    n = 6000
    counts = Counter(_draws(tune.qrandint(0, 10, 5), n=n))
    assert all(abs(counts[v] / n - 1 / 3) < 0.03 for v in (0, 5, 10)), counts
    counts = Counter(_draws(tune.qrandint(1, 20, 3), n=n))
    assert set(counts) == {3, 6, 9, 12, 15, 18} and all(abs(c / n - 1 / 6) < 0.025 for c in counts.values()), counts
    logq = Counter(_draws(tune.qlograndint(1, 64, 4), n=n))
    shares = [logq[v] / n for v in range(4, 65, 4)]
    assert all(a > b for a, b in zip(shares[:5], shares[1:6])), shares  # falls steadily over the first multiples
    with pytest.raises(InvalidArgumentError, match=r"qrandint\(lower=1, upper=3, q=5\): no multiple of 5"):
        tune.qrandint(1, 3, 5)


def test_integer_domains():
    assert set(_draws(tune.randint(0, 3))) == {0, 1, 2}  # upper excluded
    assert all(isinstance(v, int) and 1 <= v < 1000 for v in _draws(tune.lograndint(1, 1000)))


def test_randn_and_choice():
    r = _draws(tune.randn(5.0, 0.1), n=1000)
    assert abs(sum(r) / len(r) - 5.0) < 0.02
    assert set(_draws(tune.choice(["a", "b", 3]))) == {"a", "b", 3}


def test_grid_points_cross_every_grid_in_nested_dicts():
    space = {"a": tune.grid_search([1, 2]), "nested": {"b": tune.grid_search(["x", "y", "z"])}, "c": 7}
    points = grid_points(space)
    assert len(points) == 6
    configs = [resolve(space, p, random.Random(0)) for p in points]
    assert {(c["a"], c["nested"]["b"]) for c in configs} == {(a, b) for a in (1, 2) for b in "xyz"}
    assert all(c["c"] == 7 for c in configs)


def test_sample_from_sees_the_other_values():
    space = {"width": tune.choice([8, 16]), "depth": tune.sample_from(lambda spec: spec.config.width * 2)}
    config = resolve(space, {}, random.Random(1))
    assert config["depth"] == config["width"] * 2


def test_domains_inside_a_chosen_value_are_drawn_too_as_rays():
    """Ray's conditional spaces: tune.choice of dicts holding domains. The trainable got the domain objects
    themselves (every trial failed on them)."""
    space = {"model": tune.choice([{"type": "a", "lr": tune.loguniform(1e-4, 1e-1)},
                                   {"type": "b", "depth": tune.choice([tune.randint(2, 4), 8])}]),
             "width": tune.sample_from(lambda spec: 2 if spec.config.model["type"] == "a" else 3)}
    configs = [resolve(space, {}, random.Random(seed)) for seed in range(40)]
    a = [c["model"] for c in configs if c["model"]["type"] == "a"]
    b = [c["model"] for c in configs if c["model"]["type"] == "b"]
    assert a and b and all(isinstance(m["lr"], float) and 1e-4 <= m["lr"] <= 1e-1 for m in a)
    assert {m["depth"] for m in b} <= {2, 3, 8} and len({m["depth"] for m in b}) > 1  # two levels deep
    assert all(c["width"] == (2 if c["model"]["type"] == "a" else 3) for c in configs)
    assert len({m["lr"] for m in a}) == len(a)  # drawn afresh for each config


def test_grid_points_come_in_rays_order():
    """Ray 2.60 sorts the grids by path and changes the first one fastest: its trials 0..7 for this space
    (read off a Tuner run) were a=1,b=3; a=2,b=3; a=1,b=4; ... muster changed the last grid fastest."""
    gen = BasicVariantGenerator()
    gen.setup({"b": tune.grid_search([3, 4]), "a": tune.grid_search([1, 2]), "n": {"c": tune.grid_search([5, 6])}},
              num_samples=1)
    configs = [gen.suggest(f"t{i}") for i in range(8)]
    assert [(c["a"], c["b"], c["n"]["c"]) for c in configs] == [
        (1, 3, 5), (2, 3, 5), (1, 4, 5), (2, 4, 5), (1, 3, 6), (2, 3, 6), (1, 4, 6), (2, 4, 6)]
    assert gen.experiment_tag(1, configs[1]) == "1_a=2,b=3,c=5"
    assert list(configs[0]) == ["b", "a", "n"]  # the config keeps the space's order


def test_a_trials_config_keeps_the_tuples_of_its_space_as_rays():
    """Ray 2.60's trial got ``{"t": (1, 2), ...}`` as given; muster's got lists in their place."""
    gen = BasicVariantGenerator(random_state=0)
    gen.setup({"t": (1, 2), "n": {"u": (3, (4,), tune.choice([5]))}, "l": [tune.choice([6]), (7,)],
               "g": tune.grid_search([(8, 9)])}, num_samples=1)
    assert gen.suggest("t0") == {"t": (1, 2), "n": {"u": (3, (4,), 5)}, "l": [6, (7,)], "g": (8, 9)}


def test_sample_from_values_are_left_out_of_the_tag_as_rays():
    """Ray 2.60's Tuner and tune.run resolve sample_from after the variant is made (its placeholders), so
    neither a trial's experiment_tag (its folder's name) nor its evaluated_params hold those values."""
    gen = BasicVariantGenerator(random_state=0)
    gen.setup({"a": tune.grid_search([2]), "b": tune.sample_from(lambda config: config["a"] * 3),
               "c": {"d": tune.sample_from(lambda: 7)}}, num_samples=1)
    config = gen.suggest("t0")
    assert config == {"a": 2, "b": 6, "c": {"d": 7}}
    assert gen.experiment_tag(0, config) == "0_a=2"
    assert gen.evaluated_params("t0", config) == {"a": 2}
    only = BasicVariantGenerator()
    only.setup({"b": tune.sample_from(lambda: 7)}, num_samples=1)
    assert only.experiment_tag(0, only.suggest("t0")) == "0"


def test_basic_variant_generator_makes_num_samples_per_grid_point_then_finishes():
    gen = BasicVariantGenerator(random_state=3)
    gen.setup({"lr": tune.uniform(0, 1), "bs": tune.grid_search([16, 32])}, num_samples=3)
    configs = []
    while (c := gen.suggest(f"t{len(configs)}")) != FINISHED:
        configs.append(c)
    assert len(configs) == 6 and sorted(c["bs"] for c in configs) == [16, 16, 16, 32, 32, 32]
    assert len({c["lr"] for c in configs}) == 6  # each sample draws afresh


def test_constant_grid_search_keeps_each_passs_random_values_over_its_grid():
    """Ray's search-space guide: BasicVariantGenerator(constant_grid_search=True) draws the random values once per
    sample and crosses them with the whole grid (muster refused the keyword)."""
    gen = BasicVariantGenerator(constant_grid_search=True, random_state=3)
    gen.setup({"lr": tune.uniform(0, 1), "opt": {"wd": tune.randint(0, 10**9)}, "bs": tune.grid_search([16, 32, 64]),
               "twice": tune.sample_from(lambda spec: spec.config.bs * 2)}, num_samples=2)
    configs = []
    while (c := gen.suggest(f"t{len(configs)}")) != FINISHED:
        configs.append(c)
    assert [c["bs"] for c in configs] == [16, 32, 64] * 2 and all(c["twice"] == 2 * c["bs"] for c in configs)
    for first in (0, 3):  # each pass: one draw for its three grid points; the two passes differ
        assert len({(c["lr"], c["opt"]["wd"]) for c in configs[first:first + 3]}) == 1
    assert configs[0]["lr"] != configs[3]["lr"]


def test_numpys_global_seed_makes_the_search_repeat_as_rays_faq_says():
    import numpy as np

    def draw():
        gen = BasicVariantGenerator()  # no random_state: numpy's global generator decides
        gen.setup({"lr": tune.uniform(0, 1), "units": tune.randint(1, 1000)}, num_samples=4)
        return [gen.suggest(f"t{i}") for i in range(4)]

    np.random.seed(1234)
    first = draw()
    np.random.seed(1234)
    assert draw() == first
    assert draw() != first  # unseeded again: other draws


def test_points_to_evaluate_come_first_and_restore_skips_made_variants():
    gen = BasicVariantGenerator(points_to_evaluate=[{"lr": 0.5}], random_state=0)
    gen.setup({"lr": tune.uniform(0, 1), "k": 1}, num_samples=2)
    first = gen.suggest("a")
    assert first == {"lr": 0.5, "k": 1}
    resumed = BasicVariantGenerator(points_to_evaluate=[{"lr": 0.5}], random_state=0)
    resumed.setup({"lr": tune.uniform(0, 1), "k": 1}, num_samples=2, skip=1)
    assert isinstance(resumed.suggest("c"), dict) and resumed.suggest("d") == FINISHED


def _all(gen):
    configs = []
    while (c := gen.suggest(f"t{len(configs)}")) != FINISHED:
        configs.append(c)
    return configs


def test_each_point_to_evaluate_takes_the_place_of_one_sample():
    # Ray's BasicVariantGenerator docstring example: 3 points and num_samples=4 make 6 trials.
    gen = BasicVariantGenerator(points_to_evaluate=[{"a": 2, "b": 2}, {"a": 1}, {"b": 2}], random_state=0)
    gen.setup({"a": tune.grid_search([1, 2]), "b": tune.randint(0, 3)}, num_samples=4)
    configs = _all(gen)
    assert gen.total == 6 and len(configs) == 6
    assert configs[0] == {"a": 2, "b": 2}
    assert configs[1]["a"] == 1 and configs[1]["b"] in (0, 1, 2)  # b drawn
    assert configs[2:4] == [{"a": 1, "b": 2}, {"a": 2, "b": 2}]  # the grid it left open is crossed
    assert [c["a"] for c in configs[4:]] == [1, 2]  # the one pass left over the space
    assert all(not isinstance(v, dict) for c in configs for v in c.values())


def test_more_points_than_samples_runs_every_point_and_draws_nothing():
    gen = BasicVariantGenerator(points_to_evaluate=[{"x": 0.1}, {"x": 0.2}, {"x": 0.3}], random_state=0)
    gen.setup({"x": tune.uniform(0, 1)}, num_samples=2)
    assert _all(gen) == [{"x": 0.1}, {"x": 0.2}, {"x": 0.3}]


def test_concurrency_limiter_holds_back_until_a_trial_completes():
    gen = BasicVariantGenerator()
    gen.setup({"x": tune.uniform(0, 1)}, num_samples=5)
    lim = ConcurrencyLimiter(gen, max_concurrent=2)
    assert isinstance(lim.suggest("a"), dict) and isinstance(lim.suggest("b"), dict)
    assert lim.suggest("c") is None
    lim.on_trial_complete("a", {"x": 1})
    assert isinstance(lim.suggest("c"), dict)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: tune.uniform(1, 1), "lower < upper"),
        (lambda: tune.loguniform(0, 1), "lower > 0"),
        (lambda: tune.choice([]), "non-empty list"),
        (lambda: tune.grid_search("abc"), "non-empty list"),
        (lambda: tune.randint(3, 3), "lower < upper"),
        (lambda: tune.qrandint(0, 10, 0), "q must be"),
        (lambda: tune.randn(0, -1), "sd must be"),
        (lambda: tune.TuneConfig(num_samples=0), "num_samples=0"),
        (lambda: tune.TuneConfig(mode="best"), "mode='best'"),
        (lambda: tune.with_resources(lambda c: None, "2 cpus"), "pass a dict"),
        (lambda: tune.with_resources(lambda c: None, {"cpu": 0}), "asks for nothing"),
        (lambda: tune.CheckpointConfig(checkpoint_frequency=-1), "checkpoint_frequency=-1"),
        (lambda: tune.CheckpointConfig(checkpoint_at_end="yes"), "checkpoint_at_end='yes'"),
        (lambda: tune.schedulers.ASHAScheduler(max_t=1, grace_period=5), "max_t must be >= grace_period"),
        (lambda: tune.schedulers.PopulationBasedTraining(), "hyperparam_mutations"),
        (lambda: tune.RunConfig(stop=5), "stop=5"),
    ],
)
def test_bad_input_names_the_value_and_the_fix(make, fragment):
    with pytest.raises((ValueError, TypeError)) as info:
        make()
    assert fragment in str(info.value)


def test_rays_sample_api_on_every_domain():
    """``Domain.sample(config=None, size=1, random_state=None)`` as in Ray (it needed an rng before)."""
    import numpy as np

    for domain in (tune.uniform(0, 1), tune.loguniform(1e-3, 1), tune.randint(0, 5), tune.choice(["x", "y"]),
                   tune.randn(0, 1), tune.qrandint(0, 10, 2)):
        one, many = domain.sample(), domain.sample(size=3)
        assert not isinstance(one, list) and isinstance(many, list) and len(many) == 3
        assert domain.sample(random_state=7) == domain.sample(random_state=7)
    np.random.seed(3)
    first = tune.uniform(0, 1).sample(size=4)
    np.random.seed(3)
    assert tune.uniform(0, 1).sample(size=4) == first  # numpy's global seed, as in Ray
    assert tune.uniform(0, 1).sample(random_state=np.random.default_rng(1)) == \
        tune.uniform(0, 1).sample(random_state=np.random.default_rng(1))
    assert all(v in (0.0, 0.25, 0.5, 0.75, 1.0) for v in tune.uniform(0, 1).quantized(0.25).sample(size=20))
    assert all(v % 3 == 0 for v in tune.randint(0, 30).quantized(3).sample(size=20))
    assert tune.sample_from(lambda: 1).is_function() and not tune.uniform(0, 1).is_function()
    with pytest.raises(InvalidArgumentError, match="size=0"):
        tune.uniform(0, 1).sample(size=0)


def test_sample_from_reads_the_config_or_rays_older_spec():
    space = {
        "a": tune.randint(5, 10),
        "b": tune.sample_from(lambda config: config["a"] * 10),  # Ray's current form (a KeyError before)
        "c": tune.sample_from(lambda spec: spec.config.a + 1),  # its older form
        "nested": {"d": tune.sample_from(lambda config: config.nested.e + 1), "e": 5},
        "z": tune.sample_from(lambda: "no arguments"),
    }
    config = resolve(space, {}, random.Random(0))
    assert config["b"] == config["a"] * 10 and config["c"] == config["a"] + 1
    assert config["nested"]["d"] == 6 and config["z"] == "no arguments"
    with pytest.raises(KeyError, match="typo"):  # the function's own error, not the fallback's
        resolve({"x": tune.sample_from(lambda config: config["typo"])}, {}, random.Random(0))
    assert tune.sample_from(lambda config: config["a"] + 1).sample(config={"a": 1}) == 2


class _StopAllAfter(tune.Stopper):
    """Ends the experiment once it has seen ``n`` results (Ray's docs' custom stopper shape)."""

    def __init__(self, n):
        self.n, self.seen = n, 0

    def __call__(self, trial_id, result):
        self.seen += 1
        return False

    def stop_all(self):
        return self.seen >= self.n


def _one_report(config):
    tune.report({"g": config["g"]})


def test_num_samples_minus_one_samples_until_a_stopper_ends_the_run(storage):
    """Ray's ``TuneConfig(num_samples=-1)`` makes trials without end until a stopping condition ends
    the run; muster refused it with an error."""
    grid = tune.Tuner(
        _one_report, param_space={"g": tune.grid_search([1, 2]), "x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(num_samples=-1, max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, verbose=0, stop=_StopAllAfter(5)),
    ).fit()
    assert len(grid) >= 5 and grid.num_errors == 0
    assert [r.config["g"] for r in grid][:5] == [1, 2, 1, 2, 1]  # pass after pass over the grid
    assert len({r.config["x"] for r in grid}) == len(grid)  # each pass draws anew
    # a restored run goes on where it was: 3 trials made, so the next is the second pass's second point
    search = BasicVariantGenerator(random_state=0)
    search.setup({"g": tune.grid_search([1, 2])}, -1, skip=3)
    assert [search.suggest(f"t{i}")["g"] for i in range(5)] == [2, 1, 2, 1, 2]
    with pytest.raises(InvalidArgumentError, match=r"num_samples=-2\): use an integer >= 1, or -1"):
        tune.TuneConfig(num_samples=-2)


def test_randn_is_a_float_domain_as_in_ray():
    """Ray's ``tune.randn`` is a ``Float`` with no bounds drawn from a normal distribution; it quantizes as one."""
    from muster.tune.search.sample import Float

    normal = tune.randn(2.0, 0.5)
    assert isinstance(normal, Float) and (normal.lower, normal.upper) == (-math.inf, math.inf)
    assert isinstance(tune.qrandn(0, 1, 0.5), Float)
    stepped = normal.quantized(0.25)
    assert isinstance(stepped, Float) and all(v % 0.25 == 0 for v in stepped.sample(size=50, random_state=0))
    drawn = Float(None, None).normal(2.0, 0.5).sample(size=2000, random_state=1)
    assert abs(sum(drawn) / len(drawn) - 2.0) < 0.05
    with pytest.raises(InvalidArgumentError, match=r"uniform\(0.0, 1.0\).normal.*tune.randn"):
        tune.uniform(0, 1).normal()
    with pytest.raises(InvalidArgumentError, match=r"needs finite bounds.*lower=-inf"):
        tune.randn().uniform()
    assert all(1 <= v < 100 for v in tune.randint(1, 100).loguniform().sample(size=20, random_state=0))
    optuna_search = pytest.importorskip("muster.tune.search.optuna").OptunaSearch
    with pytest.raises(InvalidArgumentError, match="randn.*no Optuna equivalent"):  # refused, as Ray refuses it
        optuna_search(space={"a": stepped}, metric="m", mode="min")


def _reports_its_config(config):
    tune.report({"seen": repr(config)})


def test_a_trial_sees_its_spaces_tuples_and_is_named_without_sample_from_values(storage):
    """What Ray 2.60's trial got for this space: tuples kept, and ``experiment_tag`` and folder
    name without the sample_from value."""
    (result,) = tune.Tuner(
        _reports_its_config,
        param_space={"betas": (0.9, 0.999), "a": tune.grid_search([2]), "b": tune.sample_from(lambda c: c["a"] * 3)},
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    ).fit()
    assert result.metrics["seen"] == "{'betas': (0.9, 0.999), 'a': 2, 'b': 6}"
    assert result.config == {"betas": (0.9, 0.999), "a": 2, "b": 6}
    assert result.metrics["experiment_tag"] == "0_a=2"
    assert "_0_a=2_" in os.path.basename(result.path) and "b=6" not in result.path
