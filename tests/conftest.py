"""Settings for every test: Hypothesis without wall-clock limits.

The machines that run the suite are shared and their speed moves by up to 3x, so no test may fail on time: property
tests get no per-example deadline and no "too slow" health check (generating inputs slowly under load is not a bug).
A test's own `@settings` still sets what it names (example counts) on top of this profile.
"""

from hypothesis import HealthCheck, settings

settings.register_profile("gpuscale", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gpuscale")
