"""Python frames with the real PyTorch on the fake GPU (issue 20): a block
run under torch.utils.checkpoint, so its forward is replayed in backward by
PyTorch's autograd worker thread (a native thread that enters Python
through PyGILState_Ensure). Run under the shim by test_pystack_torch.sh;
argv[1]: iterations."""
import sys

import torch
from torch.utils.checkpoint import checkpoint


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(512, 512)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


def train_step(m, x):
    y = checkpoint(m, x, use_reentrant=True)
    y.sum().backward()


def main():
    m = Block().cuda()
    x = torch.randn(256, 512, device="cuda", requires_grad=True)
    for _ in range(int(sys.argv[1])):
        train_step(m, x)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
