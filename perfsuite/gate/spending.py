"""Group-sequential looks: how much of the level each look may spend, and its boundary.

The gate looks at a benchmark a few planned times (after so many worker pairs) and may stop at any of
them. Testing every look at the full level would inflate the false-alarm rate; Bonferroni (level / K per
look) keeps it but wastes power. Alpha spending (Lan & DeMets, "Discrete sequential boundaries for
clinical trials", Biometrika 70(3), 1983) gives look ``k``, taken at information fraction ``t_k``
(worker pairs so far / worker pairs planned), the level ``alpha(t_k) - alpha(t_{k-1})``, with the
O'Brien-Fleming-type spending function ``alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))``: almost
nothing early (a look at half the pairs may stop only on a very large change), nearly the whole level at
the last look. A look taken early because the time budget ran out is the last: it spends what is left
(``alpha(1)``), which the spending approach allows for any sequence of fractions.

Boundaries are on the z scale of a statistic with independent increments (a Brownian motion ``W(t)``,
``Z_k = W(t_k) / sqrt(t_k)``), found look by look so that the probability of first crossing at look
``k`` under the null equals its spent level, by numerical integration of the continuation density
(Jennison & Turnbull, "Group Sequential Methods with Applications to Clinical Trials", 2000,
chapter 19). One-sided: only crossings upwards stop (the gate tests ``slower`` and ``faster`` as two
one-sided questions, each at ``alpha``). ``tests/gate/test_spending.py`` checks the boundaries against
published tables.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats as scipy_stats

# Grid for the continuation density: points per unit of standard deviation and the lower cut-off (in
# standard deviations of W(t_k)); the mass below -LOWER_SD is under 1e-15.
GRID_PER_SD = 80
LOWER_SD = 8.0


def obrien_fleming_spent(fraction: float, alpha: float) -> float:
    """Level spent by information ``fraction`` (0..1] under Lan-DeMets's O'Brien-Fleming-type
    function ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))`` (Lan & DeMets 1983); ``alpha`` at ``t = 1``.
    ``ValueError`` on a fraction outside (0, 1] or ``alpha`` outside (0, 1)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"information fraction must lie in (0, 1], got {fraction!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    z = scipy_stats.norm.isf(alpha / 2)
    return float(2 * scipy_stats.norm.sf(z / math.sqrt(fraction)))


def _crossing(
    density: np.ndarray, grid: np.ndarray, step: float, bound_w: float, var: float
) -> float:
    """P(continue to here, then W jumps above ``bound_w``): the density times the Gaussian tail."""
    tail = scipy_stats.norm.sf((bound_w - grid) / math.sqrt(var))
    return float(np.trapezoid(density * tail, dx=step))


@functools.cache
def spending_bounds(
    fractions: tuple[float, ...], alpha: float, final: bool = True
) -> tuple[float, ...]:
    """One-sided z boundaries for looks at increasing information ``fractions``, spending ``alpha`` by
    ``obrien_fleming_spent``. Look ``k`` stops when ``Z_k >= bound_k``. With ``final`` the last look
    spends everything left (also when its fraction is below 1, as a last look cut short does), so under
    the null the chance of any stop is ``alpha``; without, it spends ``alpha(t_last)`` (an interim look:
    more looks may follow). ``ValueError`` on fractions not increasing in (0, 1]."""
    if not fractions or list(fractions) != sorted(set(fractions)) or not 0 < fractions[0]:
        raise ValueError(f"fractions must increase within (0, 1], got {fractions!r}")
    if fractions[-1] > 1:
        raise ValueError(f"fractions must increase within (0, 1], got {fractions!r}")
    spent = [obrien_fleming_spent(t, alpha) for t in fractions]
    if final:
        spent[-1] = alpha
    bounds: list[float] = []
    density = grid = None
    step = 0.0
    previous_t, previous_spent = 0.0, 0.0
    for t, total in zip(fractions, spent):
        level = max(total - previous_spent, 1e-300)
        if density is None:  # first look: W(t) ~ N(0, t)
            bound = float(scipy_stats.norm.isf(level))
        else:
            var = t - previous_t

            low, high = -10.0, 40.0
            for _ in range(200):  # bisection: the crossing probability falls as the bound rises
                middle = (low + high) / 2
                crossed = _crossing(density, grid, step, middle * math.sqrt(t), var)
                low, high = (middle, high) if crossed > level else (low, middle)
                if high - low < 1e-7:
                    break
            bound = high
        bounds.append(bound)
        # the density of W(t) on the continuation region W(t) < bound * sqrt(t)
        sd = math.sqrt(t)
        upper = bound * sd
        new_grid = np.linspace(
            -LOWER_SD * sd, upper, max(2, int((upper + LOWER_SD * sd) / sd * GRID_PER_SD))
        )
        new_step = float(new_grid[1] - new_grid[0])
        if density is None:
            new_density = scipy_stats.norm.pdf(new_grid, scale=sd)
        else:
            var = t - previous_t
            kernel = scipy_stats.norm.pdf(
                (new_grid[:, None] - grid[None, :]) / math.sqrt(var)
            ) / math.sqrt(var)
            new_density = np.trapezoid(kernel * density[None, :], dx=step, axis=1)
        density, grid, step = new_density, new_grid, new_step
        previous_t, previous_spent = t, total
    return tuple(bounds)


def nominal_levels(
    fractions: tuple[float, ...], alpha: float, final: bool = True
) -> tuple[float, ...]:
    """Each look's one-sided nominal level ``1 - Phi(bound_k)`` (``spending_bounds``, ``final`` as
    there): the p-value a
    look's statistic must fall below. A look whose statistic is Student's t (few worker pairs) is
    tested at this nominal level on its own t distribution, the usual approximation for group-
    sequential t tests (Jennison & Turnbull 2000, section 3.8); the seeded simulations in
    ``tests/gate/test_sequential.py`` check that the level holds with few clusters."""
    return tuple(float(scipy_stats.norm.sf(b)) for b in spending_bounds(fractions, alpha, final))
