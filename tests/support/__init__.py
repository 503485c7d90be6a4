"""Builders the tests share: servings, fleets, bad input, generated specs, the golden cases, the integration readers
and figures.

pytest puts ``tests/`` on the path (``pythonpath`` in pyproject.toml), so a test imports them as
``from support import servingbuilder as sb``. ``make golden`` runs ``support.golden_cases`` the same way.
"""
