"""What the client suites share: a named check that stops the suite at its first failure, and the
line that ends a passing suite."""

passed = 0


def check(name, condition, detail=""):
    global passed
    if not condition:
        raise AssertionError(f"{name}: {detail}")
    passed += 1
    print(f"ok {name}")


def done():
    print(f"{passed} passed, 0 failed")
