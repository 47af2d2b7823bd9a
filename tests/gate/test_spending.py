"""Alpha spending: the boundaries against published tables, and their level by simulation."""

import numpy as np
import pytest

from perfsuite.gate.spending import nominal_levels, obrien_fleming_spent, spending_bounds


# Lan-DeMets O'Brien-Fleming-type spending, one-sided alpha 0.025, equally spaced looks: the
# boundaries R's rpact (getDesignGroupSequential(typeOfDesign = "asOF")) and gsDesign (sfLDOF) print.
PUBLISHED = {
    3: (3.7103, 2.5114, 1.9930),
    5: (4.8769, 3.3569, 2.6803, 2.2898, 2.0310),
}


@pytest.mark.parametrize("looks", sorted(PUBLISHED))
def test_boundaries_match_the_published_table(looks):
    fractions = tuple((k + 1) / looks for k in range(looks))
    assert spending_bounds(fractions, 0.025) == pytest.approx(PUBLISHED[looks], abs=2e-3)


def test_one_look_is_the_fixed_sample_test_and_the_function_spends_alpha_at_the_end():
    assert spending_bounds((1.0,), 0.025)[0] == pytest.approx(1.95996, abs=1e-4)
    assert obrien_fleming_spent(1.0, 0.001) == pytest.approx(0.001)
    spent = [obrien_fleming_spent(t, 0.01) for t in (0.25, 0.5, 0.75, 1.0)]
    assert spent == sorted(spent) and spent[0] < 1e-4


def test_a_look_cut_short_spends_what_is_left():
    """A last look at 5/8 of the information still spends the whole level (simulated)."""
    fractions = (0.5, 0.625)
    bounds = np.array(spending_bounds(fractions, 0.05))
    rng = np.random.default_rng(1)
    steps = rng.standard_normal((200_000, 2)) * np.sqrt(np.diff((0.0,) + fractions))
    z = np.cumsum(steps, axis=1) / np.sqrt(fractions)
    crossed = (z >= bounds).any(axis=1).mean()
    assert crossed == pytest.approx(0.05, abs=0.003)


def test_simulated_brownian_motion_crosses_with_probability_alpha():
    fractions = (0.5, 0.75, 1.0)
    bounds = np.array(spending_bounds(fractions, 0.025))
    rng = np.random.default_rng(0)
    steps = rng.standard_normal((400_000, 3)) * np.sqrt(np.diff((0.0,) + fractions))
    z = np.cumsum(steps, axis=1) / np.sqrt(fractions)
    assert (z >= bounds).any(axis=1).mean() == pytest.approx(0.025, abs=0.0015)


def test_nominal_levels_are_the_bounds_tails_and_rise_look_by_look():
    levels = nominal_levels((0.5, 0.75, 1.0), 0.001)
    assert list(levels) == sorted(levels) and levels[-1] < 0.001 and levels[0] < 1e-5


@pytest.mark.parametrize("fractions", [(), (0.5, 0.5), (0.0, 1.0), (0.5, 1.2)])
def test_bad_fractions_are_refused(fractions):
    with pytest.raises(ValueError, match="fractions"):
        spending_bounds(fractions, 0.01)


def test_an_interim_look_spends_only_its_share():
    """A first look at half the information, not the last: O'Brien-Fleming's share, not the whole level."""
    interim = nominal_levels((0.5,), 0.01, final=False)[0]
    assert interim == pytest.approx(obrien_fleming_spent(0.5, 0.01)) and interim < 0.001
    assert nominal_levels((0.5,), 0.01)[0] == pytest.approx(0.01)
