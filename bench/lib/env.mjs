// What machine a run was made on: printed at the start of every run and stored in the results.
import { execFileSync } from 'node:child_process';
import { cpus, totalmem, release } from 'node:os';

function sh(cmd, args) {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return '';
  }
}

export function describeMachine(dir) {
  const [source = '?', fstype = '?', options = ''] = sh('findmnt', ['-n', '-o', 'SOURCE,FSTYPE,OPTIONS', '-T', dir]).split(/\s+/);
  const device = source.replace(/^\/dev\//, '').replace(/[0-9]+$/, '');
  const rotational = sh('cat', [`/sys/block/${device}/queue/rotational`]);
  const model = sh('cat', [`/sys/block/${device}/device/model`]) || sh('cat', [`/sys/block/${device}/device/vendor`]);
  const c = cpus();
  const head = sh('git', ['rev-parse', '--short', 'HEAD']);
  const dirty = sh('git', ['status', '--porcelain', '--', 'src']) ? ' + uncommitted src/ changes' : '';
  return {
    commit: head ? `${head}${dirty}` : 'unknown',
    node: process.version,
    v8: process.versions.v8,
    platform: `${process.platform} ${release()}`,
    cpu: `${c[0]?.model ?? '?'} × ${c.length}`,
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    benchDir: dir,
    filesystem: fstype,
    mountOptions: options,
    device: `${source}${model ? ` (${model})` : ''}${rotational === '0' ? ', non-rotational' : rotational === '1' ? ', reports rotational (virtual disk)' : ''}`,
  };
}
