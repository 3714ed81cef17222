"""Run the demo's training (msoverflow.demo.train) with its model module loaded from another file: the same
script before and after `msoverflow patch --how source --write` changed a copy of msoverflow/demo/model.py.

    python demo_with_model.py MODEL.py [demo.train options ...]
"""
import importlib.util
import sys


def main():
    model_path, rest = sys.argv[1], sys.argv[2:]
    spec = importlib.util.spec_from_file_location("msoverflow.demo.model", model_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["msoverflow.demo.model"] = module     # demo.train imports its model from here
    spec.loader.exec_module(module)
    from msoverflow.demo import train
    return train.main(rest)


if __name__ == "__main__":
    sys.exit(main())
