"""The measurements behind docs/validation.md, run from a checkout as ``python -m validation.<tool>``.

Not part of the perfsuite package (the wheel leaves this folder out): each module reproduces
one claim of the validation page (gate error rates, contention detection, fidelity against
``torch.utils.benchmark.Timer``, separate runs and the speed reference, page faults, the
OpenMP wait policy). ``contend`` starts and stops the busy processes the others put beside a run;
``user_repo`` builds the throwaway user repository that ``change_points make-history`` times and the
end-to-end tests run perfsuite in (the tests import it too).
"""
