import t from 'tap';
import { createHmac } from 'node:crypto';
import { signDetachedJws, verifyDetachedJws } from '../../../agent/pki/jws.js';

// Vectors from kubernetes cluster-bootstrap token/jws/jws_test.go, computed there with go-jose.
const content = 'Hello from the other side. I must have called a thousand times.';
const secret = 'my voice is my passcode';
const id = 'joshua';
const upstream = 'eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8';

t.test('signs exactly as kube-controller-manager bootstrapsigner does', async (t) => {
  t.equal(signDetachedJws(content, id, secret), upstream);
  t.equal(signDetachedJws('', id, secret), 'eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..7Ui1ALizW4jXphVUB7xUqC9vLYLL9RZeOFfVLoB7Tgk');
  t.equal(signDetachedJws(content, id, ''), 'eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..UfkqvDGiIFxrMnFseDj9LYJOLNrvjW8aHhF71mvvAs8');
});

t.test('agrees with a plain HMAC-SHA256 over header.payload for a real token shape', async (t) => {
  const tokenId = 'abcdef';
  const tokenSecret = '0123456789abcdef';
  const kubeconfig = 'apiVersion: v1\nkind: Config\nclusters: []\n';
  const header = Buffer.from('{"alg":"HS256","kid":"abcdef"}').toString('base64url');
  const input = `${header}.${Buffer.from(kubeconfig).toString('base64url')}`;
  const mac = createHmac('sha256', tokenSecret).update(input).digest('base64url');
  t.equal(signDetachedJws(kubeconfig, tokenId, tokenSecret), `${header}..${mac}`);
  t.equal(verifyDetachedJws(`${header}..${mac}`, kubeconfig, tokenId, tokenSecret), true);
});

t.test('accepts the signature published for our token', async (t) => {
  t.equal(verifyDetachedJws(upstream, content, id, secret), true);
  t.equal(verifyDetachedJws(upstream + '\n', content, id, secret), true, 'trailing newline from a file is ignored');
});

t.test('rejects a signature made with another secret', async (t) => {
  t.equal(verifyDetachedJws(upstream, content, id, 'not my passcode'), false);
});

t.test('rejects a signature for another token id', async (t) => {
  t.equal(verifyDetachedJws(upstream, content, 'abcdef', secret), false);
  // Even when the MAC is right, the header must name our token.
  const forOther = signDetachedJws(content, 'other1', secret);
  t.equal(verifyDetachedJws(forOther, content, id, secret), false);
});

t.test('rejects a tampered kubeconfig', async (t) => {
  t.equal(verifyDetachedJws(upstream, content + ' ', id, secret), false);
  t.equal(verifyDetachedJws(upstream, content.replace('Hello', 'hello'), id, secret), false);
});

t.test('rejects malformed and non-HS256 tokens', async (t) => {
  const [header, , sig] = upstream.split('.') as [string, string, string];
  const noneHeader = Buffer.from('{"alg":"none","kid":"joshua"}').toString('base64url');
  const critHeader = Buffer.from('{"alg":"HS256","crit":["x"],"kid":"joshua","x":1}').toString('base64url');
  const critSig = createHmac('sha256', Buffer.concat([Buffer.from(secret), Buffer.alloc(32 - secret.length)]))
    .update(`${critHeader}.${Buffer.from(content).toString('base64url')}`)
    .digest('base64url');
  const reordered = Buffer.from(`{"kid":"${id}","alg":"HS256"}`).toString('base64url');
  const reorderedSig = createHmac('sha256', Buffer.concat([Buffer.from(secret), Buffer.alloc(32 - secret.length)]))
    .update(`${reordered}.${Buffer.from(content).toString('base64url')}`)
    .digest('base64url');
  for (const jws of [
    '',
    'garbage',
    `${header}.${Buffer.from(content).toString('base64url')}.${sig}`, // attached, not detached
    `${header}..${sig}foo`,
    `${header}..${sig}.x`,
    `${noneHeader}..`,
    `${noneHeader}..${sig}`,
    `${critHeader}..${critSig}`,
    // Correctly signed, but not what the bootstrapsigner writes: another key order.
    `${reordered}..${reorderedSig}`,
    `!!!..${sig}`,
  ]) {
    t.equal(verifyDetachedJws(jws, content, id, secret), false, JSON.stringify(jws));
  }
});
