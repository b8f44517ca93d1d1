#!/usr/bin/env python3
"""Slurm batch scripts, unchanged, under Slurm 22.05 and under Gantry, side by side (issue 47 A).

Each script of bench/slurm_scripts/ (our own, written for the idioms of the public scripts
docs/slurm.md lists) is submitted alone to an idle cluster, once with Slurm's `sbatch` and
once with `gantry sbatch`, each in a work directory of its own, and what a user sees is
compared: whether it was accepted, every job's final state and exit code (a script may
submit more), the SLURM_* variables and CUDA_VISIBLE_DEVICES its batch script and its
srun tasks saw (each script writes `env | sort` into *.env files), and the names of the
files it left. Job numbers differ between the two and are compared by their order.

Both clusters have the same shape and names: partition (pool) `gpu` of 4 nodes `h100-0..3`
with 8 H100s, the default, and `a100` of 2 nodes `a100-0..1` with 8 A100s, 64 CPUs and
512 GB each; node features `h100,ib` and `a100`; typed GPUs `h100` and `a100`. Slurm runs as
the peer in ../shared/peers/slurm does (one slurmd per node on loopback, placeholder GPU
device files, no cgroups), here with typed gres, features and two partitions; Gantry runs
gantryd and one gantry-agent per node with emulated GPUs and its cgroups (device rules hide
the GPUs a job does not hold), with the site mapping a site would write (QoS `normal`,
account `proj` and the default account, the partitions, the GPU types, the features).
Slurm keeps its accounting in slurmdbd on a MariaDB of its own (in the run's directory,
on loopback), with association and QoS enforcement: the user `root` may use account `proj`
(its default) and QoS `normal`, as Gantry's site mapping allows. Each job's `sacct` rows
(job, batch step and srun steps: JobID, JobName, State, ExitCode) are compared too.

    python3 bench/slurm_scripts.py [--build build/release] [--only NAME,...] [--keep]

Needs root (apt-get for Slurm's packages when missing; a private network namespace that has
only loopback, as the peer's run.sh). Prints a table and writes DIR/results.json; exits 1
when a script could not be run on either side. About 17 minutes for all 58 here.
"""
import argparse, glob, json, os, re, shutil, stat, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slurm_side_by_side import stop_cluster  # noqa: E402 (SIGTERM, the last started first; SIGKILL after 40 s)
SCRIPTS = os.path.join(ROOT, 'bench', 'slurm_scripts')
POOLS = [('gpu', 'h100', 4, 'H100-80GB', 'h100,ib'), ('a100', 'a100', 2, 'A100-80GB', 'a100')]
CTLD_PORT, SLURMD_PORT, DBD_PORT, DB_PORT = 16917, 16918, 16819, 16820
FIRST_JOB = 1001  # job numbers on both sides start here, apart from array indices and counts
PACKAGES = ['munge', 'slurm-client', 'slurmctld', 'slurmd', 'slurmdbd', 'mariadb-server', 'iproute2',
            'util-linux']
# What is compared of each env file (others differ by nature: paths, PIDs, tokens).
KEYS = ['SLURM_JOB_ID', 'SLURM_JOBID', 'SLURM_JOB_NAME', 'SLURM_ARRAY_JOB_ID', 'SLURM_ARRAY_TASK_ID',
        'SLURM_ARRAY_TASK_COUNT', 'SLURM_ARRAY_TASK_MIN', 'SLURM_ARRAY_TASK_MAX', 'SLURM_ARRAY_TASK_STEP',
        'SLURM_PROCID', 'SLURM_LOCALID', 'SLURM_NODEID', 'SLURM_NTASKS', 'SLURM_NPROCS', 'SLURM_NNODES',
        'SLURM_JOB_NUM_NODES', 'SLURM_TASKS_PER_NODE', 'SLURM_NTASKS_PER_NODE', 'SLURM_GPUS_ON_NODE',
        'SLURM_JOB_NODELIST', 'SLURM_NODELIST', 'SLURMD_NODENAME', 'SLURM_JOB_PARTITION',
        'SLURM_CPUS_PER_TASK', 'SLURM_CPUS_ON_NODE', 'SLURM_JOB_GPUS', 'SLURM_GPUS_PER_TASK',
        'SLURM_GPUS_PER_NODE', 'SLURM_MEM_PER_NODE', 'SLURM_STEP_ID', 'SLURM_STEPID', 'SLURM_STEP_NUM_TASKS',
        'SLURM_STEP_NUM_NODES', 'SLURM_STEP_NODELIST', 'SLURM_STEP_TASKS_PER_NODE', 'SLURM_SUBMIT_DIR',
        'SLURM_RESTART_COUNT', 'SLURM_STEP_GPUS', 'SLURM_GPU_BIND', 'SLURM_DISTRIBUTION', 'CUDA_VISIBLE_DEVICES', 'STAGE',
        'SLURM_JOB_ACCOUNT', 'SLURM_JOB_QOS', 'SLURM_JOB_CPUS_PER_NODE', 'SLURM_GTIDS', 'SLURM_TOPOLOGY_ADDR',
        'SLURM_TOPOLOGY_ADDR_PATTERN', 'SLURM_JOB_USER', 'SLURM_JOB_UID', 'SLURM_JOB_GID', 'SLURM_CLUSTER_NAME',
        'SLURM_CPUS_PER_GPU', 'SLURM_GPUS', 'SLURM_EXPORT_ENV', 'SLURM_GET_USER_ENV', 'SLURM_OPEN_MODE',
        'SLURM_JOB_DEPENDENCY', 'SLURM_UMASK', 'GPU_DEVICE_ORDINAL', 'ROCR_VISIBLE_DEVICES', 'MPI_RESULT',
        'PMI_RANK', 'PMI_SIZE', 'PMI_JOBID', 'SLURM_MPI_TYPE', 'SLURM_PRIO_PROCESS']
# Named like CUDA_VISIBLE_DEVICES (Slurm's gres/gpu sets all three alike).
GPU_LISTS = ['CUDA_VISIBLE_DEVICES', 'GPU_DEVICE_ORDINAL', 'ROCR_VISIBLE_DEVICES']


def log(msg):
    print(time.strftime('[%H:%M:%S] ') + msg, file=sys.stderr, flush=True)


def wait_for(what, cond, timeout, interval=0.2):
    end = time.time() + timeout
    while time.time() < end:
        try:
            if cond():
                return
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(interval)
    raise RuntimeError('timed out waiting for ' + what)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=kw.pop('timeout', 60), **kw)


# ---------------------------------------------------------------- Slurm

class Slurm:
    """Slurm 22.05 on loopback: munged, slurmctld and one slurmd per node, in `d`."""

    fenced = False  # TaskPlugin=task/none: no device cgroup, CUDA_VISIBLE_DEVICES by the node's indexes

    def __init__(self, d):
        self.d, self.procs = d, []
        for sub in ('munge', 'state', 'log', 'dev'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.chmod(os.path.join(d, 'munge'), 0o700)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(d, 'slurm.conf'))
        # A real Slurm's commands, not the Gantry CLI's links to it.
        self.env['PATH'] = ':'.join(p for p in self.env['PATH'].split(':') if not p.endswith('/slurm'))

    def start(self):
        d = self.d
        key = os.path.join(d, 'munge', 'munge.key')
        with open(key, 'wb') as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o400)
        sock = os.path.join(d, 'munge', 'munge.sock')
        self.procs.append(subprocess.Popen(
            ['munged', '-F', '--force', '--socket=' + sock, '--key-file=' + key,
             '--pid-file=' + os.path.join(d, 'munge', 'pid'), '--log-file=' + os.path.join(d, 'munge', 'log'),
             '--seed-file=' + os.path.join(d, 'munge', 'seed'), '--origin=127.0.0.1'],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for('munged', lambda: os.path.exists(sock), 15)
        host = os.uname().nodename.split('.')[0]
        for g in range(8):  # placeholder GPU devices (Slurm drops GPUs without File=): /dev/null's numbers
            path = os.path.join(d, 'dev', 'gpu%d' % g)
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
            except OSError:
                open(path, 'w').close()
        conf = [
            'ClusterName=sbs', 'SlurmctldHost=%s(127.0.0.1)' % host, 'SlurmctldPort=%d' % CTLD_PORT,
            'SlurmdPort=%d' % SLURMD_PORT, 'SlurmUser=root', 'SlurmdUser=root', 'AuthType=auth/munge',
            'CredType=cred/munge', 'AuthInfo=socket=' + sock, 'CommunicationParameters=NoAddrCache',
            'StateSaveLocation=%s/state' % d, 'SlurmdSpoolDir=%s/spool/slurmd.%%n' % d,
            'SlurmctldPidFile=%s/slurmctld.pid' % d, 'SlurmdPidFile=%s/slurmd.%%n.pid' % d,
            'SlurmctldLogFile=%s/log/slurmctld.log' % d, 'SlurmdLogFile=%s/log/slurmd.%%n.log' % d,
            'PluginDir=/usr/lib/x86_64-linux-gnu/slurm-wlm', 'ProctrackType=proctrack/pgid',
            'TaskPlugin=task/none', 'JobAcctGatherType=jobacct_gather/none',
            'AccountingStorageType=accounting_storage/slurmdbd', 'AccountingStorageHost=127.0.0.1',
            'AccountingStoragePort=%d' % DBD_PORT, 'AccountingStorageEnforce=associations,limits,qos',
            'AccountingStoragePass=' + sock,  # the munge socket slurmdbd's connections use
            'JobCompType=jobcomp/filetxt',
            'JobCompLoc=%s/jobcomp.txt' % d, 'MailProg=/bin/true', 'MpiDefault=none',
            'SlurmdParameters=config_overrides', 'SelectType=select/cons_tres',
            'SelectTypeParameters=CR_Core_Memory', 'GresTypes=gpu', 'SchedulerType=sched/backfill',
            'MinJobAge=600', 'FirstJobId=%d' % FIRST_JOB, 'ReturnToService=2', 'SlurmdTimeout=300', 'InactiveLimit=0', 'KillWait=5',
            'MessageTimeout=30', 'DefMemPerCPU=4000']
        gres = ['AutoDetect=off']
        port = SLURMD_PORT
        for part, typ, count, _model, features in POOLS:
            names = ['%s-%d' % (typ, i) for i in range(count)]
            for n in names:
                port += 1
                conf.append('NodeName=%s NodeHostname=%s NodeAddr=127.0.0.1 Port=%d CPUs=64 Boards=1 '
                            'SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 RealMemory=512000 '
                            'Gres=gpu:%s:8 Features=%s State=UNKNOWN' % (n, host, port, typ, features))
            gres.append('NodeName=%s-[0-%d] Name=gpu Type=%s Count=8 File=%s/dev/gpu[0-7]' % (typ, count - 1, typ, d))
            conf.append('PartitionName=%s Nodes=%s-[0-%d] Default=%s MaxTime=INFINITE State=UP' % (
                part, typ, count - 1, 'YES' if part == 'gpu' else 'NO'))
        with open(os.path.join(d, 'slurm.conf'), 'w') as f:
            f.write('\n'.join(conf) + '\n')
        with open(os.path.join(d, 'gres.conf'), 'w') as f:
            f.write('\n'.join(gres) + '\n')
        open(os.path.join(d, 'plugstack.conf'), 'w').close()
        self.start_accounting(sock)
        self.procs.append(subprocess.Popen(['slurmctld', '-D', '-i', '-f', self.env['SLURM_CONF']], env=self.env,
                                           stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, 'log', 'ctld.err'), 'w')))
        wait_for('slurmctld', lambda: run(['scontrol', 'ping'], env=self.env).stdout.find('UP') >= 0, 60)
        for _part, typ, count, _model, _f in POOLS:
            for i in range(count):
                n = '%s-%d' % (typ, i)
                os.makedirs(os.path.join(d, 'spool', 'slurmd.' + n), exist_ok=True)
                self.procs.append(subprocess.Popen(['slurmd', '-D', '-N', n, '-f', self.env['SLURM_CONF']],
                                                   env=self.env, stdout=subprocess.DEVNULL,
                                                   stderr=open(os.path.join(d, 'log', n + '.err'), 'w')))
        nodes = sum(p[2] for p in POOLS)
        wait_for('slurmd nodes idle', lambda: len(run(['sinfo', '-h', '-N', '-t', 'idle', '-o', '%N'],
                                                      env=self.env).stdout.split()) >= nodes, 90, 0.5)

    def start_accounting(self, munge_sock):
        """MariaDB in d/mysql on loopback, slurmdbd on it, and the cluster's associations."""
        d = self.d
        db = os.path.join(d, 'mysql')
        r = run(['mariadb-install-db', '--no-defaults', '--datadir=' + db, '--user=root',
                 '--auth-root-authentication-method=normal', '--skip-test-db'], timeout=180)
        if r.returncode != 0:
            raise RuntimeError('mariadb-install-db: ' + r.stderr[-2000:])
        sock = os.path.join(d, 'mysql.sock')
        self.procs.append(subprocess.Popen(
            ['mariadbd', '--no-defaults', '--datadir=' + db, '--socket=' + sock, '--port=%d' % DB_PORT,
             '--bind-address=127.0.0.1', '--user=root', '--pid-file=' + os.path.join(d, 'mysql.pid'),
             '--innodb-buffer-pool-size=64M', '--innodb-lock-wait-timeout=900'],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, 'log', 'mariadb.err'), 'w')))
        wait_for('mariadbd', lambda: run(['mariadb', '--no-defaults', '-S', sock, '-uroot', '-e', 'select 1'])
                 .returncode == 0, 120, 0.5)
        conf = os.path.join(d, 'slurmdbd.conf')
        with open(conf, 'w') as f:
            f.write('\n'.join([
                'AuthType=auth/munge', 'AuthInfo=socket=' + munge_sock, 'DbdHost=localhost',
                'DbdAddr=127.0.0.1', 'DbdPort=%d' % DBD_PORT, 'SlurmUser=root',
                'LogFile=%s/log/slurmdbd.log' % d, 'PidFile=%s/slurmdbd.pid' % d,
                'PluginDir=/usr/lib/x86_64-linux-gnu/slurm-wlm',
                'StorageType=accounting_storage/mysql', 'StorageHost=127.0.0.1', 'StoragePort=%d' % DB_PORT,
                'StorageUser=root', 'StorageLoc=slurm_acct_db']) + '\n')
        os.chmod(conf, 0o600)
        self.procs.append(subprocess.Popen(['slurmdbd', '-D'], env=self.env, stdout=subprocess.DEVNULL,
                                           stderr=open(os.path.join(d, 'log', 'slurmdbd.err'), 'w')))
        wait_for('slurmdbd', lambda: run(['sacctmgr', '-n', 'show', 'cluster'], env=self.env).returncode == 0, 60, 0.5)
        for cmd in (['add', 'cluster', 'sbs'], ['add', 'account', 'proj', 'Cluster=sbs'],
                    ['add', 'user', 'root', 'Account=proj', 'DefaultAccount=proj', 'Cluster=sbs']):
            r = run(['sacctmgr', '-i'] + cmd, env=self.env)
            if r.returncode != 0 and 'already exists' not in r.stdout + r.stderr:
                raise RuntimeError('sacctmgr %s: %s' % (' '.join(cmd), r.stdout + r.stderr))

    def submit(self, script, work, prefix=()):
        r = run(list(prefix) + ['sbatch', '--parsable', script], cwd=work, env=self.env)
        return r.returncode == 0, (r.stdout.strip().split(';')[0] if r.returncode == 0 else r.stderr.strip())

    def idle(self):
        r = run(['squeue', '-h', '-o', '%i'], env=self.env)
        return r.returncode == 0 and not r.stdout.strip()

    def jobs(self, since):
        """Every job numbered `since` or later: [(number, name, state, exit code)] in order."""
        r = run(['scontrol', 'show', 'job', '-o'], env=self.env)
        out = []
        for line in r.stdout.splitlines():
            f = dict(kv.split('=', 1) for kv in line.split() if '=' in kv)
            if 'JobId' not in f or int(f['JobId']) < since:
                continue
            out.append((int(f['JobId']), f.get('JobName', ''), f.get('JobState', ''), f.get('ExitCode', '')))
        return sorted(out)

    def cancel_all(self):
        run(['scancel', '--quiet', '--full', '-u', 'root'], env=self.env)

    def acct(self, numbers):
        return acct_rows(['sacct'], numbers, self.env)

    def stop(self):
        self.cancel_all()
        stop_cluster(self.procs)


# ---------------------------------------------------------------- Gantry

class Gantry:
    """gantryd on SQLite and one gantry-agent per node (emulated GPUs), in `d`."""

    def __init__(self, build, d):
        self.d, self.procs = d, []
        self.bin = lambda x: os.path.join(os.path.abspath(build), 'src', x)

    def start(self):
        d = self.d
        cfg = ['cluster: sbs', 'pools:']
        for part, typ, count, model, _f in POOLS:
            cfg += ['  - name: %s' % typ, '    count: %d' % count, '    gpus: 8', '    gpu_model: %s' % model,
                    '    cpus: 64', '    memory_gb: 512']
        cfg += ['queues:', '  - name: research', '    guaranteed_gpus: 48', 'site:',
                '  qos: {normal: standard}', '  accounts: {proj: research}', '  default_account: proj',
                '  partitions: {gpu: h100, a100: a100}', '  default_partition: gpu',
                '  gpu_types: {h100: H100-80GB, a100: A100-80GB}',
                '  features: {h100: [h100, ib], a100: [a100]}']
        with open(os.path.join(d, 'cluster.yaml'), 'w') as f:
            f.write('\n'.join(cfg) + '\n')
        db = os.path.join(d, 'state.db')
        gantryd = self.bin('gantryd')
        run([gantryd, 'init', '--db', db], check=True)
        tok = lambda *a: run([gantryd, 'token', 'create', '--db', db] + list(a), check=True).stdout.strip()
        self.token, agent_tok = tok('--team', 'a', '--queues', 'research'), tok('--agent', '--any-node')
        port_file = os.path.join(d, 'port')
        self.procs.append(subprocess.Popen(
            [gantryd, '--config', os.path.join(d, 'cluster.yaml'), '--db', db, '--listen', '127.0.0.1:0',
             '--port-file', port_file], stderr=open(os.path.join(d, 'gantryd.log'), 'w')))
        wait_for('gantryd', lambda: os.path.getsize(port_file) > 0, 15)
        self.url = 'http://127.0.0.1:%s' % open(port_file).read().strip()
        env = dict(os.environ, GANTRY_SERVER=self.url, GANTRY_TOKEN=agent_tok)
        for _part, typ, count, model, _f in POOLS:
            for i in range(count):
                n = '%s-%d' % (typ, i)
                self.procs.append(subprocess.Popen(
                    [self.bin('gantry-agent'), '--node', n, '--emulate', '8x' + model, '--run-as', 'agent',
                     '--state-dir', os.path.join(d, 'agent-' + n)], env=env,
                    stderr=open(os.path.join(d, 'agent-%s.log' % n), 'w')))
        # Job numbers from FIRST_JOB on, as Slurm's FirstJobId: an array of FIRST_JOB - 1
        # placeholders, cancelled.
        r = self.cli('submit', '--id', 'fill', '--queue', 'research', '--gpus', '0', '--array',
                     '1-%d%%1' % (FIRST_JOB - 1), '--', 'sleep', '600')
        if r.returncode != 0 or self.cli('cancel', 'fill').returncode != 0:
            raise RuntimeError('placeholder jobs: ' + r.stderr)
        nodes = sum(p[2] for p in POOLS)
        wait_for('agents up', lambda: len([l for l in self.cli('nodes').stdout.splitlines() if ' up ' in l]) >= nodes,
                 60, 0.5)
        # Whether the agents hide a worker's other GPUs (cgroup device rules): CUDA then counts
        # its GPUs from 0, as Slurm's under ConstrainDevices (the Slurm side here has none).
        logs = [open(os.path.join(d, 'agent-%s-%d.log' % (p[1], i))).read() for p in POOLS for i in range(p[2])]
        self.fenced = all('workers run in cgroups' in l and 'GPU devices are NOT constrained' not in l for l in logs)

    def cli(self, *args, cwd=None):
        return run([self.bin('gantry'), '--server', self.url, '--token', self.token] + list(args), cwd=cwd)

    def submit(self, script, work, prefix=()):
        r = run(list(prefix) + [self.bin('gantry'), '--server', self.url, '--token', self.token, 'sbatch',
                                '--parsable', script], cwd=work)
        return r.returncode == 0, (r.stdout.strip() if r.returncode == 0 else r.stderr.strip())

    def idle(self):
        r = self.cli('ls', '--noheader', '-o', '%i')
        return r.returncode == 0 and not r.stdout.strip()

    def cancel_all(self):
        for job in self.cli('ls', '--noheader', '-o', '%i').stdout.split():
            self.cli('cancel', job)

    def acct(self, numbers):
        return acct_rows([self.bin('gantry'), '--server', self.url, '--token', self.token, 'acct'], numbers)

    def jobs(self, since):
        # JobIDRaw: an array task's own number, as scontrol's JobId on Slurm's side.
        r = self.cli('acct', '-X', '-P', '-n', '-S', '1d', '-o', 'JobIDRaw,JobName,State,ExitCode')
        out = []
        for line in r.stdout.splitlines():
            f = line.split('|')
            if len(f) < 4:
                continue
            num = int(re.match(r'\d+', f[0]).group(0))
            if num >= since:
                # ExitCode as scontrol's, as on Slurm's side (sacct's allocation row says 0:0
                # for a TIMEOUT where scontrol says how the batch script ended).
                show = self.cli('scontrol', 'show', 'job', str(num)).stdout
                m = re.search(r' ExitCode=(\S+)', show)
                out.append((num, f[1], f[2], m.group(1) if m else f[3]))
        return sorted(out)

    def stop(self):
        stop_cluster(self.procs)


# ---------------------------------------------------------------- one script on one side

def acct_rows(command, numbers, env=None):
    """The sacct rows of jobs `numbers` (JobID, JobName, State, ExitCode; steps too), once
    none is still running and each has its name: Slurm's slurmctld sends a job's start
    record to slurmdbd a few seconds late, and a job that ended sooner shows meanwhile as
    named `allocation`, without its array."""
    if not numbers:
        return []
    rows = []
    for _ in range(80):
        r = run(command + ['-j', ','.join(str(n) for n in numbers), '-P', '-n', '-o', 'JobID,JobName,State,ExitCode'],
                env=env)
        rows = [tuple(line.split('|')[:4]) for line in r.stdout.splitlines() if line.count('|') >= 3]
        if r.returncode == 0 and not any(row[2] in ('RUNNING', 'PENDING', 'COMPLETING') or row[1] == 'allocation'
                                         for row in rows):
            break
        time.sleep(0.25)
    return rows


def expand_hostlist(text):
    """h100-[0-1,3],a100-0 -> [h100-0, h100-1, h100-3, a100-0] (Slurm's host list form)."""
    out = []
    for m in re.finditer(r'([^,\[]+)(?:\[([^\]]*)\])?', text):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            out.append(prefix)
            continue
        for part in ranges.split(','):
            lo, _, hi = part.partition('-')
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(prefix + str(i).zfill(len(lo)))
    return out


NODE_KEYS = ('SLURM_JOB_NODELIST', 'SLURM_NODELIST', 'SLURMD_NODENAME', 'SLURM_STEP_NODELIST', 'SLURM_TOPOLOGY_ADDR')


def read_env(path):
    env, key = {}, None
    for line in open(path, errors='replace'):
        m = re.match(r'([A-Za-z_][A-Za-z0-9_]*)=(.*)', line.rstrip('\n'))
        if m:
            key = m.group(1)
            env[key] = m.group(2)
    return env


def observe(side, script, work, first_number):
    """Submits `script` in `work` and waits until the side is idle again: what it gave."""
    shutil.copy(script, work)
    name = os.path.basename(script)
    # A script may be submitted from a shell with other resource limits (`# bench:
    # prlimit=--nofile=777:4096 ...`), as a user's `ulimit` before sbatch.
    m = re.search(r'^# bench: prlimit=(.*)$', open(script).read(), re.M)
    ok, said = side.submit(name, work, ['prlimit'] + m.group(1).split() if m else [])
    obs = {'accepted': ok, 'said': said if not ok else '', 'jobs': [], 'env': {}, 'files': [], 'acct': []}
    if not ok:
        return obs, first_number
    time.sleep(0.5)
    # A script may say it needs longer (`# bench: wait_s=N`): Slurm holds a requeued job for
    # two minutes (BeginTime) before its next run.
    m = re.search(r'^# bench: wait_s=(\d+)', open(script).read(), re.M)
    wait_s = int(m.group(1)) if m else 120
    try:
        wait_for('%s to finish' % name, side.idle, wait_s, 0.3)
    except RuntimeError:
        obs['said'] = 'still running after %d s: cancelled' % wait_s
        side.cancel_all()
        wait_for('%s cancelled' % name, side.idle, 60, 0.5)
    time.sleep(0.3)  # output files are closed after the job's end is recorded
    jobs = side.jobs(first_number)
    ids = {}  # job number -> J1, J2, ... in order; then array tasks' own numbers, in order
    for num, _n, _s, _e in jobs:
        ids.setdefault(num, 'J%d' % (len(ids) + 1))
    seen = set()
    for path in glob.glob(os.path.join(work, '**', '*.env'), recursive=True):
        seen.update(int(v) for k, v in read_env(path).items() if k == 'SLURM_JOB_ID' and v.isdigit())
    for num in sorted(seen):
        ids.setdefault(num, 'J%d' % (len(ids) + 1))
    norm = lambda s: re.sub(r'\d{4,}', lambda m: ids.get(int(m.group(0)), m.group(0)), s)
    obs['jobs'] = [(n, s.split()[0], e) for _num, n, s, e in jobs]
    obs['acct'] = [(norm(i), n, s.split()[0], e) for i, n, s, e in side.acct([num for num, *_ in jobs])]
    for path in sorted(glob.glob(os.path.join(work, '**', '*.env'), recursive=True)):
        env = read_env(path)
        rel = os.path.relpath(path, work)
        # Nodes by their place in the job's node list (which nodes each scheduler picks
        # differs and says nothing): N0 is the job's first node.
        order = expand_hostlist(env.get('SLURM_JOB_NODELIST', ''))
        place = lambda v: ','.join('N%d' % order.index(n) if n in order else n for n in expand_hostlist(v))
        obs['env'][rel] = {k: (norm(env[k]) if k in ('SLURM_JOB_ID', 'SLURM_JOBID', 'SLURM_ARRAY_JOB_ID',
                                                     'SLURM_JOB_DEPENDENCY')
                               else place(env[k]) if k in NODE_KEYS
                               else env[k].replace(work, 'WORK')) for k in KEYS if k in env}
        # CUDA_VISIBLE_DEVICES as the GPUs it names on the node: where the side's device rules
        # hide the others, CUDA counts from 0 among the task's own (SLURM_STEP_GPUS, else the
        # job's SLURM_JOB_GPUS), as Slurm's under ConstrainDevices; else the node's indexes.
        held = env.get('SLURM_STEP_GPUS', env.get('SLURM_JOB_GPUS', '')).split(',')
        for key in GPU_LISTS:
            cvd = obs['env'][rel].get(key, '')
            if side.fenced and cvd and all(c.isdigit() and int(c) < len(held) for c in cvd.split(',')):
                obs['env'][rel][key] = ','.join(held[int(c)] for c in cvd.split(','))
    obs['files'] = sorted(norm(os.path.relpath(p, work)) for p in glob.glob(os.path.join(work, '**', '*'), recursive=True)
                          if os.path.isfile(p) and not p.endswith(name))
    return obs, max([n for n, *_ in jobs], default=first_number - 1) + 1


def compare(a, b):
    """The differences between Slurm's observations `a` and Gantry's `b`, as short lines."""
    diffs = []
    if a['accepted'] != b['accepted']:
        return ['accepted: Slurm %s, Gantry %s (%s)' % (a['accepted'], b['accepted'], a['said'] or b['said'])]
    if not a['accepted']:
        return []
    if a['said'] != b['said']:  # one side did not finish
        diffs.append('finished: Slurm %s, Gantry %s' % (a['said'] or 'yes', b['said'] or 'yes'))
    if [j[1:] for j in a['jobs']] != [j[1:] for j in b['jobs']]:
        diffs.append('jobs (state, exit): Slurm %s, Gantry %s' % ([j[1:] for j in a['jobs']], [j[1:] for j in b['jobs']]))
    if [j[0] for j in a['jobs']] != [j[0] for j in b['jobs']]:
        diffs.append('job names: Slurm %s, Gantry %s' % ([j[0] for j in a['jobs']], [j[0] for j in b['jobs']]))
    if sorted(a['acct']) != sorted(b['acct']):
        only_a = [r for r in a['acct'] if r not in b['acct']]
        only_b = [r for r in b['acct'] if r not in a['acct']]
        diffs.append('sacct rows: only Slurm %s, only Gantry %s' % (only_a, only_b))
    if a['files'] != b['files']:
        diffs.append('files: only Slurm %s, only Gantry %s' % (sorted(set(a['files']) - set(b['files'])),
                                                              sorted(set(b['files']) - set(a['files']))))
    for f in sorted(set(a['env']) & set(b['env'])):
        ea, eb = a['env'][f], b['env'][f]
        for k in KEYS:
            if ea.get(k) != eb.get(k):
                diffs.append('%s %s: Slurm %r, Gantry %r' % (f, k, ea.get(k), eb.get(k)))
    return diffs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build', 'release'))
    ap.add_argument('--only', default='', help='comma-separated script names (without .sbatch)')
    ap.add_argument('--out', default='')
    ap.add_argument('--keep', action='store_true')
    a = ap.parse_args()
    if not os.environ.get('GANTRY_SBS_INNER'):
        if os.getuid() != 0:
            sys.exit('slurm_scripts.py needs root (apt-get, unshare), as the Slurm peer does')
        need = [p for p in PACKAGES if subprocess.run(['dpkg', '-s', p], capture_output=True).returncode]
        if need:
            log('installing ' + ' '.join(need))
            made = not os.path.exists('/usr/sbin/policy-rc.d')
            if made:  # keep the packages from starting system daemons
                with open('/usr/sbin/policy-rc.d', 'w') as f:
                    f.write('#!/bin/sh\nexit 101\n')
                os.chmod('/usr/sbin/policy-rc.d', 0o755)
            subprocess.run(['apt-get', 'update', '-q'], stdout=subprocess.DEVNULL, check=True)
            subprocess.run(['apt-get', 'install', '-y', '-q', '--no-install-recommends'] + need,
                           env=dict(os.environ, DEBIAN_FRONTEND='noninteractive'), stdout=subprocess.DEVNULL, check=True)
            if made:
                os.remove('/usr/sbin/policy-rc.d')
        subprocess.run(['update-alternatives', '--quiet', '--set', 'slurmd', '/usr/sbin/slurmd-wlm'], check=False)
        subprocess.run(['update-alternatives', '--quiet', '--set', 'slurmctld', '/usr/sbin/slurmctld-wlm'], check=False)
        # bash stays PID 1 there and reaps what srun's children leave (Slurm's proctrack/pgid
        # waits for a job's process group to empty: zombies under a PID 1 that never reaps
        # kept every job with a step alive for a minute).
        os.execvp('unshare', ['unshare', '--net', '--pid', '--fork', '--mount-proc', '--', 'bash', '-c',
                              'GANTRY_SBS_INNER=1 "$@"; exit $?', 'bash', sys.executable] + sys.argv)
    subprocess.run(['ip', 'link', 'set', 'lo', 'up'], check=True)
    subprocess.run(['ip', 'addr', 'add', '127.0.0.2/8', 'dev', 'lo'], check=False)  # glibc's AI_ADDRCONFIG
    out = a.out or tempfile.mkdtemp(prefix='gantry-slurm-scripts.')
    os.makedirs(out, exist_ok=True)
    scripts = sorted(glob.glob(os.path.join(SCRIPTS, '*.sbatch')))
    if a.only:
        scripts = [s for s in scripts if os.path.basename(s)[:-7] in a.only.split(',')]
    results = {}
    sides = []
    try:
        slurm = Slurm(os.path.join(out, 'slurm'))
        sides.append(slurm)
        slurm.start()
        log('Slurm up: ' + run(['sinfo', '-h', '-o', '%P %D %G %f'], env=slurm.env).stdout.replace('\n', '; '))
        gantry = Gantry(a.build, os.path.join(out, 'gantry'))
        os.makedirs(gantry.d, exist_ok=True)
        sides.append(gantry)
        gantry.start()
        log('Gantry up')
        nums = {'slurm': FIRST_JOB, 'gantry': FIRST_JOB}
        for script in scripts:
            name = os.path.basename(script)[:-7]
            obs = {}
            for label, side in (('slurm', slurm), ('gantry', gantry)):
                work = os.path.join(out, 'work', label, name)
                os.makedirs(work)
                obs[label], nums[label] = observe(side, script, work, nums[label])
            diffs = compare(obs['slurm'], obs['gantry'])
            results[name] = {'same': not diffs, 'diffs': diffs, 'slurm': obs['slurm'], 'gantry': obs['gantry']}
            log('%-18s %s' % (name, 'same' if not diffs else '%d difference(s)' % len(diffs)))
    finally:
        for s in reversed(sides):
            s.stop()
    with open(os.path.join(out, 'results.json'), 'w') as f:
        json.dump(results, f, indent=1)
    same = sum(r['same'] for r in results.values())
    print('\n| script | accepted (Slurm / Gantry) | same observables | differences |\n|---|---|---|---|')
    for name, r in results.items():
        print('| %s | %s / %s | %s | %s |' % (name, 'yes' if r['slurm']['accepted'] else 'no',
                                           'yes' if r['gantry']['accepted'] else 'no', 'yes' if r['same'] else 'no',
                                           '; '.join(r['diffs'])[:400].replace('|', '\\|')))
    print('\n%d of %d scripts: the same observables under Slurm and Gantry (results in %s)' % (same, len(results), out))
    if not a.keep and not a.out:
        shutil.rmtree(os.path.join(out, 'slurm'), ignore_errors=True)
    return 0 if len(results) == len(scripts) else 1


if __name__ == '__main__':
    sys.exit(main())
