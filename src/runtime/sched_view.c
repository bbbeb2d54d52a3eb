/*
 * kvlm_sched_list_choices (kvlm.h): the public name of the scheduler's
 * read-only list of its choices (sched_list_choices, runtime/sched_view.h,
 * whose record is the public kvlm_sched_choice_info).
 */
#include "runtime/sched_view.h"

int kvlm_sched_list_choices(const kvlm_sched *s, kvlm_sched_choice_info *out, int cap) {
    return sched_list_choices(s, out, cap < 0 ? 0 : cap);
}
