#include "internal.h"

/* The C client's waits (a reply, a fence) spin by the one rule of fenceline (native/common/
 * spin_rule.h), the one the service's native receive and fenceline.waiting follow. */

void fl_spin_init(fl_spin *s, int64_t max_ns) { fl_spin_rule_init(&s->rule, max_ns); }

void fl_spin_set_max(fl_spin *s, int64_t max_ns) { fl_spin_rule_set_max(&s->rule, max_ns); }

int64_t fl_spin_budget(fl_spin *s) { return fl_spin_rule_budget(&s->rule, fl_htl_now_ns()); }

void fl_spin_observe(fl_spin *s, int64_t waited_ns, int64_t budget_ns) {
  fl_spin_rule_observe(&s->rule, waited_ns, budget_ns);
}
