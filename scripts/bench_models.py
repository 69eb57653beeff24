"""Models shared by the side-by-side benchmark scripts (bench-*.py)."""
import torch
import torchvision


def torchvision_model(name, passes, batch):
    """torchvision's `name` with random weights seeded 0 and BatchNorm statistics from `passes`
    training-mode forwards of `batch` random 224x224 images (so that BatchNorm is not the
    identity), in evaluation mode."""
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=1000)
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(torch.randn(batch, 3, 224, 224))
    return model.eval()
