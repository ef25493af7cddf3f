package bench

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Process accounting from /proc (Linux): peak RSS and CPU time of the
// consumer, of the PostgreSQL server and of pinctl itself (which hosts the
// in-process broker), and the machine's busy time.

// clockTicks is USER_HZ, the unit of /proc CPU times (100 on Linux).
const clockTicks = 100

// peakRSS returns VmHWM of pid in bytes.
func peakRSS(pid int) (int64, bool) {
	st, ok := procStatus(pid)
	v, have := st["VmHWM"]
	return v, ok && have
}

// procStatus returns the memory sizes of /proc/<pid>/status in bytes
// (VmHWM, RssAnon, RssFile, …: the lines in kB).
func procStatus(pid int) (map[string]int64, bool) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return nil, false
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v) // "123456 kB"
		if !ok || len(fs) != 2 || fs[1] != "kB" {
			continue
		}
		if kb, err := strconv.ParseInt(fs[0], 10, 64); err == nil {
			out[k] = kb * 1024
		}
	}
	return out, sc.Err() == nil
}

// procStat returns the parent pid and the CPU seconds (user + system) of
// pid, and those of its children that have exited and that it has waited
// for (cutime + cstime).
func procStat(pid string) (ppid int, cpu, children float64, ok bool) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, 0, 0, false
	}
	// "pid (comm) state ppid … utime stime …": comm may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	fs := strings.Fields(string(b[i+1:]))
	if len(fs) < 15 {
		return 0, 0, 0, false
	}
	ppid, _ = strconv.Atoi(fs[1])
	ut, _ := strconv.ParseFloat(fs[11], 64)
	st, _ := strconv.ParseFloat(fs[12], 64)
	cut, _ := strconv.ParseFloat(fs[13], 64)
	cst, _ := strconv.ParseFloat(fs[14], 64)
	return ppid, (ut + st) / clockTicks, (cut + cst) / clockTicks, true
}

func processCPU(pid int) float64 {
	_, cpu, _, _ := procStat(strconv.Itoa(pid))
	return cpu
}

// treeCPU returns the CPU seconds of root and of its direct children (a
// postmaster and its backends): those alive now, and those that exited
// and root has reaped (its cutime and cstime). Without the latter a
// backend that exits within a window (an autovacuum worker, a
// connection closed) takes its CPU out of the sum: on 2026-12-03 a paced
// run measured PostgreSQL at −6 µs an event.
func treeCPU(root int) float64 {
	if root <= 0 {
		return 0
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	total := 0.0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ppid, cpu, children, ok := procStat(e.Name())
		switch {
		case !ok:
		case pid == root:
			total += cpu + children
		case ppid == root:
			total += cpu
		}
	}
	return total
}

// postmasterPID reads the server's pid from its data directory.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

// machineCPU returns the busy, stolen and total CPU seconds of the
// machine since boot (all cores), from /proc/stat. Stolen (steal) is the
// time a virtual machine's cores wanted to run and the hypervisor ran
// another guest instead: it counts as busy (the measure could not use it)
// and is part of no process's time.
func machineCPU() (busy, steal, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fs := strings.Fields(line)
	if len(fs) < 5 || fs[0] != "cpu" {
		return 0, 0, 0
	}
	for i, f := range fs[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
		if i == 7 {
			steal = v
		}
	}
	return busy / clockTicks, steal / clockTicks, total / clockTicks
}

// cpuSnapshot is the CPU seconds of each party at one instant.
type cpuSnapshot struct {
	consumer, postgres, pinctl, busy, steal, total float64
}

func takeCPU(consumerPID, postmaster int) cpuSnapshot {
	busy, steal, total := machineCPU()
	return cpuSnapshot{
		consumer: processCPU(consumerPID),
		postgres: treeCPU(postmaster),
		pinctl:   processCPU(os.Getpid()),
		busy:     busy,
		steal:    steal,
		total:    total,
	}
}

// cpuUse is the CPU used between two snapshots, in cores (CPU seconds per
// second of wall time).
type cpuUse struct {
	Consumer float64 `json:"consumer_cores"`
	Postgres float64 `json:"postgres_cores"`
	Pinctl   float64 `json:"pinctl_broker_cores"`
	Machine  float64 `json:"machine_busy_cores"`
	// Others is what the rest of the machine used: other people's work
	// that the measure shared the cores with (before 2026-12-03 it
	// included Stolen).
	Others float64 `json:"other_processes_cores"`
	// Stolen is what the hypervisor gave other guests of the host while
	// this machine's cores had work (steal time): cores the measure did
	// not have. A run with much of it measured a smaller, jittery machine
	// (absent before 2026-12-03).
	Stolen float64 `json:"stolen_cores"`
	// Paused is how many seconds more the wall clock moved than the
	// monotonic clock over the window: the time the virtual machine stood
	// still (paused by its host, for a snapshot or a migration), which
	// no process and no counter of /proc/stat saw. The rates and
	// latencies the run takes from wall-clock times (the consumer's log
	// lines, the messages' timestamps) are then wrong by as much (absent
	// before 2026-12-03, and when under pauseNoteSeconds).
	Paused float64 `json:"paused_seconds,omitempty"`
	Cores  int     `json:"machine_cores"`
	// Idle is the machine's idle share, 1 − machine busy cores ÷ cores
	// (absent before 2026-12-02).
	Idle float64 `json:"machine_idle_share"`
}

// pauseNoteSeconds is the gap between the wall clock and the monotonic
// clock over a window from which a run is flagged as paused: NTP slews
// the wall clock by at most 0.5 ms a second, so a larger gap is a step.
const pauseNoteSeconds = 0.1

// pausedBetween is the wall clock's advance over the monotonic clock's
// from a to b (both from time.Now, which carries both readings): the
// seconds the machine stood still, when its host paused it, or the wall
// clock stepped. Under pauseNoteSeconds it is 0.
func pausedBetween(a, b time.Time) float64 {
	return clockGap(b.Round(0).Sub(a.Round(0)), b.Sub(a)) // Round(0) drops the monotonic reading
}

// clockGap is wall − monotonic in seconds, 0 when under pauseNoteSeconds
// either way.
func clockGap(wall, monotonic time.Duration) float64 {
	if gap := (wall - monotonic).Seconds(); math.Abs(gap) >= pauseNoteSeconds {
		return gap
	}
	return 0
}

// spanUse is what a span of a run cost, from the snapshot taken at aAt to
// the one taken at zAt: the cores each party used (and any pause of the
// machine), and the consumer's and PostgreSQL's CPU µs per event of the
// span's events.
func spanUse(a, z cpuSnapshot, aAt, zAt time.Time, events float64, cores int) (u cpuUse, consumerUs, pgUs float64) {
	u = cpuBetween(a, z, zAt.Sub(aAt).Seconds(), cores)
	u.Paused = pausedBetween(aAt, zAt)
	return u, (z.consumer - a.consumer) / events * 1e6, (z.postgres - a.postgres) / events * 1e6
}

func cpuBetween(a, b cpuSnapshot, wall float64, cores int) cpuUse {
	if wall <= 0 {
		return cpuUse{}
	}
	u := cpuUse{
		Consumer: (b.consumer - a.consumer) / wall,
		Postgres: (b.postgres - a.postgres) / wall,
		Pinctl:   (b.pinctl - a.pinctl) / wall,
		Cores:    cores,
	}
	if dt := b.total - a.total; dt > 0 {
		u.Machine = (b.busy - a.busy) / dt * float64(cores)
		u.Stolen = max(0, (b.steal-a.steal)/dt*float64(cores))
		u.Others = max(0, u.Machine-u.Consumer-u.Postgres-u.Pinctl-u.Stolen)
		u.Idle = max(0, 1-u.Machine/float64(cores))
	}
	return u
}
