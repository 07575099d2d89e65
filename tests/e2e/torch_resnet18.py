"""Loads a cdl resnet18 checkpoint (its model tensors: parameters and
batch-norm buffers, without the optimizer.* state) strictly into
torchvision's resnet18 with the CIFAR stem (3x3 stride-1 conv1, no
max-pool): every name and shape must match.
Usage: torch_resnet18.py CKPT CHANNELS"""
import sys

import safetensors.torch
import torch
import torchvision


def main():
    ckpt, channels = sys.argv[1], int(sys.argv[2])
    model = torchvision.models.resnet18(num_classes=10)
    model.conv1 = torch.nn.Conv2d(channels, 64, 3, 1, 1, bias=False)
    model.maxpool = torch.nn.Identity()
    state = {k: v for k, v in safetensors.torch.load_file(ckpt).items()
             if not k.startswith("optimizer.")}
    model.load_state_dict(state)  # strict: every key and shape, no extras
    print(f"PASS: {len(state)} tensors load strictly into torchvision.models.resnet18")


if __name__ == "__main__":
    main()
