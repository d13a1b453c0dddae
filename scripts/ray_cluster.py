"""Start, stop or lose a node of a local Ray cluster of several nodes (campflow.testing.ray_cluster).

python scripts/ray_cluster.py start --root /tmp/campflow-ray --workers 2 --cpus 1
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=/tmp/campflow-ray/auth_token   # as start prints
CAMPFLOW__ROLLOUT__TASK_RUNNER=ray CAMPFLOW__ROLLOUT__RAY_ADDRESS=127.0.0.1:PORT campflow eval -p oracle
python scripts/ray_cluster.py kill-node --root /tmp/campflow-ray --node worker1   # lose one node
python scripts/ray_cluster.py stop --root /tmp/campflow-ray
"""

from campflow.testing.ray_cluster import main

if __name__ == "__main__":
    main()
