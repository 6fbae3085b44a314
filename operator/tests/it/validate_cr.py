"""Validates LakeCluster files against the CRD's openAPIV3Schema with jsonschema.

kubernetes-validate does not know custom kinds, so custom resources are checked against the CRD's
own schema. Usage: validate_cr.py CRD.yaml CR.yaml...; prints one line per file, exits 1 if any fail.
"""

import sys

import jsonschema
import yaml


def main() -> int:
    crd_path, *files = sys.argv[1:]
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    validator = jsonschema.Draft7Validator(schema)
    failed = False
    for path in files:
        with open(path) as f:
            doc = yaml.safe_load(f)
        errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
        if errors:
            failed = True
            for e in errors:
                where = ".".join(str(p) for p in e.absolute_path)
                print(f"invalid {path}: {where}: {e.message}")
        else:
            print(f"valid {path}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
