"""LeRobot integration: its dataset contract, the versions it comes in, its training script fed by robocache."""
