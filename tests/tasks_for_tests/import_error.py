"""A user task module that cannot even be imported."""

import a_module_that_does_not_exist  # noqa: F401


def build(seed):
    raise AssertionError("never reached")
