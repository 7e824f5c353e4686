"""Every registered method through the generic checks of ``tests/method_checks.py`` (discovered from the registry:
a method added with one registry line gets them all; no method list lives here)."""

import pytest

from method_checks import registered_checks

pytestmark = pytest.mark.usefixtures("single_thread_torch")

CASES = list(registered_checks())


@pytest.mark.parametrize("name,check,fn", CASES, ids=[f"{n}-{c}" for n, c, _ in CASES])
def test_method_check(name, check, fn):
    fn()
