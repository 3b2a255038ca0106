// Entry point: placeholder until the commands land.
import { VERSION } from '../version.js';
const args = process.argv.slice(2);
if (args.includes('--version')) {
  process.stdout.write(`kubeboot ${VERSION} (node ${process.version})\n`);
} else {
  process.stdout.write('usage: kubeboot <bootstrap|run|check|status|renew> [options]\n');
}
