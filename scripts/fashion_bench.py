"""What the Fashion-MNIST benchmarks share: the small ResNet they train, running the lithe CLI
(one failure ends the script with lithe's own message), reading an accuracy, reading the IDX files
normalised as lithe normalises them, and the common command-line flags (--lithe, --work,
--epochs, --threads)."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FASHION = "/usr/share/datasets/fashion-mnist"


def fashion_idx(name, images):
    """One Fashion-MNIST IDX file of FASHION by base name ("train-images-idx3-ubyte"; gzip or
    plain): images as float [N, 1, 28, 28] normalised as lithe's loader does, or labels (long)."""
    import gzip
    import numpy as np
    import torch
    path = os.path.join(FASHION, name)
    opener, path = (open, path) if os.path.exists(path) else (gzip.open, path + ".gz")
    with opener(path, "rb") as f:
        raw = f.read()
    if images:
        x = np.frombuffer(raw, np.uint8, offset=16).reshape(-1, 1, 28, 28)
        return (torch.from_numpy(x.copy()).float() / 255 - 0.2860) / 0.3530
    return torch.from_numpy(np.frombuffer(raw, np.uint8, offset=8).copy()).long()


def small_resnet(path):
    import torch
    from torch import nn

    class BasicBlock(nn.Module):  # torchvision's, by name and shape (the int8 config reads it)
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                            nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out += identity
            return self.relu(out)

    class SmallResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(16)
            self.relu = nn.ReLU(inplace=True)
            self.layer1 = BasicBlock(16, 16, 1)
            self.layer2 = BasicBlock(16, 32, 2)
            self.layer3 = BasicBlock(32, 64, 2)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            x = self.relu(self.bn1(self.conv1(x)))
            x = self.layer3(self.layer2(self.layer1(x)))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    torch.manual_seed(0)
    torch.jit.script(SmallResNet().eval()).save(path)


def lithe(args, *argv):
    """Runs `lithe ARGV --threads T` and returns its standard output."""
    done = subprocess.run([args.lithe, *argv, "--threads", str(args.threads)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("FAILED: lithe %s\n%s%s" % (" ".join(argv), done.stdout, done.stderr))
    return done.stdout


def accuracy(args, model):
    """lithe eval's test accuracy of `model` on Fashion-MNIST's 10,000 test images."""
    out = lithe(args, "eval", "--model", model)
    return float(re.search(r"accuracy ([0-9.]+)", out).group(1))


def add_common_arguments(parser, work):
    """--lithe, --work (default build/WORK), --epochs (training of the dense models), --threads."""
    parser.add_argument("--lithe", default=os.path.join(ROOT, "build/bin/lithe"))
    parser.add_argument("--work", default=os.path.join(ROOT, "build", work))
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)


def trained_int8_candidates(args, w):
    """The bundled LeNet and small_resnet, each trained --epochs by `lithe train`, with the zoo's
    int8 config for it: yields (name, dense model path, config path). `w(name)` is a path in the
    work folder."""
    import json
    import zoo
    small_resnet(w("resnet.pt"))
    models = {"lenet": os.path.join(ROOT, "samples/models/lenet.pt"), "resnet": w("resnet.pt")}
    for name, source in models.items():
        dense = w(name + ".dense.pt")
        lithe(args, "train", "--model", source, "--epochs", str(args.epochs), "--output", dense)
        config = w(name + ".int8.json")
        with open(config, "w") as f:
            json.dump(zoo.int8_config(dense), f)
        yield name, dense, config
