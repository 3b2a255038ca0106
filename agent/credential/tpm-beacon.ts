/**
 * The approver's freshness beacon as a node reads it, just before it quotes
 * (records/tpm-beacon.ts): a GET of `tpmbeacons.kubeboot.io/kubeboot` with
 * the credential that files the CSR (the bootstrap token, or the node's
 * certificate on renewal). Without it no quote would be approved, so a
 * beacon that cannot be read fails the issue here, with what to fix, rather
 * than as a denied CSR.
 */
import { KubebootError } from '../errors.js';
import type { KubeClient } from '../kube/client.js';
import { objectPath } from '../kube/objects.js';
import { recordsPath, type TpmBeaconObject } from '../records/kinds.js';
import { acceptedBeacons, BEACON_NAME, BEACON_REF } from '../records/tpm-beacon.js';

/** The newest beacon, or a KubebootError saying why there is none to quote over. */
export async function readTpmBeacon(client: KubeClient, signal?: AbortSignal): Promise<Buffer> {
  const res = await client.request<TpmBeaconObject>('GET', objectPath(recordsPath('tpmbeacons'), BEACON_NAME), {
    accept: [403, 404],
    ...(signal ? { signal } : {}),
  });
  if (res.status === 404)
    throw new KubebootError(
      `${BEACON_REF} does not exist: the approver's leader publishes it (is kubeboot approver running, with its node-identity.yaml applied?); a TPM quote must bind it`,
    );
  if (res.status === 403)
    throw new KubebootError(
      `this node may not get ${BEACON_REF} (apply the approver's node-identity.yaml: ClusterRoleBinding kubeboot:tpm-beacon-readers); a TPM quote must bind it`,
    );
  const beacons = acceptedBeacons(res.body);
  if ('problem' in beacons) throw new KubebootError(`${beacons.problem}: the approver's leader replaces it; a TPM quote must bind it`);
  const newest = beacons[0];
  if (newest === undefined) throw new KubebootError(`${BEACON_REF} holds no beacon`);
  return newest;
}
