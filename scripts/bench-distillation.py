#!/usr/bin/env python3
"""Knowledge distillation while fine-tuning a pruned model (issue: training-time algorithms), every
figure from one run of this script, on Fashion-MNIST:

  models     the bundled LeNet (samples/models/lenet.pt) and the small ResNet of
             bench-int8-fashion.py, each trained here by lithe train for EPOCHS epochs (seed 0):
             the dense model, which is also the teacher
  pruning    l1_filter 0.5 with dependency_aware on every Conv2d but the first (LeNet: conv1 and
             conv2 both, it has no residual), one-shot
  compared   the pruned model fine-tuned for FINETUNE epochs (lr 0.01) by lithe compress, once on
             the labels alone and once with --teacher DENSE (--kd-temperature T --kd-alpha A,
             by default Lithe's 4 and 0.9),
             for every seed of SEEDS (the shuffling order); same seeds on both sides
  labels     with --train-samples N, both fine-tunings see only the first N training images
             (a seeded random subset of the 60,000, written as a tensor file): the teacher, trained
             on all of them, is what a user has when labelled data for fine-tuning is scarce
Accuracies are lithe compress's own evaluation after fine-tuning on the 10,000 test images.

Usage: .venv/bin/python scripts/bench-distillation.py [--lithe build/bin/lithe]
           [--work build/bench-distillation] [--epochs 3] [--finetune 1] [--seeds 0,1,2]
           [--threads 2] [--models lenet,resnet] [--temperature 4] [--alpha 0.9]
           [--train-samples N] [--lr 0.01] [--lr-step 0] [--dense-lr 0.01]
           [--dense-lr-step 0]
"""
import argparse
import json
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from fashion_bench import accuracy, add_common_arguments, fashion_idx, lithe, small_resnet  # noqa: E402


def subset_data(n, train_file, test_file):
    """Writes N seeded-random training images and every test image as lithe tensor files
    ({"images", "labels"}, normalised as lithe normalises Fashion-MNIST); returns the flags."""
    import torch
    images = fashion_idx("train-images-idx3-ubyte", True)
    labels = fashion_idx("train-labels-idx1-ubyte", False)
    pick = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(5))[:n]
    torch.save({"images": images[pick].contiguous(), "labels": labels[pick].contiguous()},
               train_file)
    torch.save({"images": fashion_idx("t10k-images-idx3-ubyte", True),
                "labels": fashion_idx("t10k-labels-idx1-ubyte", False)}, test_file)
    return ["--data", train_file, "--test-data", test_file]


def main():
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "bench-distillation")
    parser.add_argument("--finetune", type=int, default=1)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--models", default="lenet,resnet")
    parser.add_argument("--temperature", default="4")
    parser.add_argument("--alpha", default="0.9")
    parser.add_argument("--train-samples", type=int, default=0)
    parser.add_argument("--lr", default="0.01")
    parser.add_argument("--lr-step", default="0",
                        help="both fine-tunings divide the lr by 10 every N epochs (0: never)")
    parser.add_argument("--dense-lr", default="0.01",
                        help="the learning rate of the dense model's (the teacher's) training")
    parser.add_argument("--dense-lr-step", default="0",
                        help="the dense training divides its lr by 10 every N epochs (0: never)")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    w = lambda name: os.path.join(args.work, name)  # noqa: E731
    data = []  # the fine-tuning data flags: all of --data's default, or a labelled subset
    if args.train_samples > 0:
        data = subset_data(args.train_samples, w("train-subset.pt"), w("test.pt"))
    small_resnet(w("resnet.pt"))
    sources = {"lenet": os.path.join(ROOT, "samples/models/lenet.pt"), "resnet": w("resnet.pt")}
    seeds = args.seeds.split(",")

    import torch
    print("| model | dense | pruned, as pruned | seed | fine-tuned, labels only | "
          "fine-tuned with the dense teacher | gain |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        dense = w(name + ".dense.pt")
        # The dense model of an earlier run in the same work folder is reused when it was
        # trained with the same settings (its recipe is written beside it).
        recipe = {"epochs": args.epochs, "lr": args.dense_lr, "lr_step": args.dense_lr_step,
                  "threads": args.threads}
        recipe_file = w(name + ".dense.json")
        if not (os.path.exists(dense) and os.path.exists(recipe_file)
                and json.load(open(recipe_file)) == recipe):
            lithe(args, "train", "--model", sources[name], "--epochs", str(args.epochs), "--lr",
                  args.dense_lr, "--lr-step", args.dense_lr_step, "--output", dense)
            with open(recipe_file, "w") as f:
                json.dump(recipe, f)
        dense_accuracy = accuracy(args, dense)
        convs = [n for n, m in torch.jit.load(dense).named_modules()
                 if m.original_name == "Conv2d" and (name == "lenet" or n != "conv1")]
        config = w(name + ".l1.json")
        with open(config, "w") as f:
            json.dump({"algorithm": "l1_filter", "options": {"dependency_aware": True},
                       "config_list": [{"sparsity": 0.5, "op_names": convs}]}, f)
        lithe(args, "compress", "--model", dense, "--config", config, "--output",
              w(name + ".pruned.pt"))
        pruned = accuracy(args, w(name + ".pruned.pt"))
        gains = []
        for seed in seeds:
            results = []
            for teacher in ([], ["--teacher", dense, "--kd-temperature", args.temperature,
                                 "--kd-alpha", args.alpha]):
                out = lithe(args, "compress", "--model", dense, "--config", config, "--epochs",
                            str(args.finetune), "--lr", args.lr, "--lr-step", args.lr_step,
                            "--seed", seed, "--json", "--output", w(name + ".finetuned.pt"),
                            *data, *teacher)
                results.append(json.loads(out[out.index("{"):])["accuracy_after"]["accuracy"])
            gains.append(results[1] - results[0])
            print("| %s | %.4f | %.4f | %s | %.4f | %.4f | %+.2f pt |" % (
                name, dense_accuracy, pruned, seed, results[0], results[1],
                100 * (results[1] - results[0])), flush=True)
        print("| %s | | | mean | | | %+.2f pt |" % (name, 100 * statistics.mean(gains)),
              flush=True)


if __name__ == "__main__":
    main()
